use anyhow::{bail, Result};
use oxray_config::{paths, secret};
use std::process::ExitCode;

pub fn run() -> Result<ExitCode> {
    let file = paths::token_file(&paths::oxray_home());
    match secret::read_trimmed(&file)? {
        Some(token) if !token.is_empty() => {
            println!("{token}");
            Ok(ExitCode::SUCCESS)
        }
        _ => bail!("no cluster token in {}: start a head on this machine with `oxray start --head`", file.display()),
    }
}
