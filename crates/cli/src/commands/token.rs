use anyhow::{bail, Context, Result};
use clap::Args;
use oxray_config::{paths, secret};
use oxray_rpc::Token;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TokenArgs {
    /// Make a token and save it to the token file if there is none yet (as Ray's flag)
    #[arg(long)]
    pub generate: bool,
}

pub fn run(args: TokenArgs) -> Result<ExitCode> {
    let home = paths::oxray_home();
    let file = paths::token_file(&home);
    if let Some((token, _)) = paths::read_token(&home)? {
        println!("{token}");
        return Ok(ExitCode::SUCCESS);
    }
    if !args.generate {
        bail!(
            "no cluster token in {}: start a head on this machine with `ray start --head`, or make one with \
             `ray get-auth-token --generate`",
            file.display()
        );
    }
    let token = Token::generate();
    secret::write_private(&file, &format!("{}\n", token.as_str()))
        .with_context(|| format!("cannot write {}", file.display()))?;
    println!("{}", token.as_str());
    Ok(ExitCode::SUCCESS)
}
