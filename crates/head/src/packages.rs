//! Uploaded packages (working_dir, py_modules archives), kept as files beside the database.

use futures_util::StreamExt;
use oxray_api_types::ApiError;
use oxray_http::ByteStream;
use oxray_runtime_env::{validate, ArchiveKind};
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

pub struct Packages {
    dir: PathBuf,
}

impl Packages {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    /// `name` has been checked to be a plain file name.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn exists(&self, name: &str) -> bool {
        self.path(name).is_file()
    }

    /// Streams the upload to a temporary file, refuses it past `limit` or when the archive
    /// is malformed or has entries escaping their target, then moves it into place.
    pub async fn put(&self, name: &str, mut body: ByteStream, limit: u64) -> Result<(), ApiError> {
        let kind = ArchiveKind::from_name(name).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let tmp = self.dir.join(format!(".{name}.{}.part", oxray_api_types::new_submission_id()));
        let internal = |e: std::io::Error| ApiError::Internal(format!("cannot store package {name}: {e}"));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp).await.map_err(internal)?;
            let mut size = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("upload of {name} broke off: {e}")))?;
                size += chunk.len() as u64;
                if size > limit {
                    return Err(ApiError::TooLarge(format!(
                        "package {name} is larger than the limit of {} MiB",
                        limit / (1024 * 1024)
                    )));
                }
                file.write_all(&chunk).await.map_err(internal)?;
            }
            file.sync_all().await.map_err(internal)?;
            let check = tmp.clone();
            tokio::task::spawn_blocking(move || validate(&check, kind))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?
                .map_err(|e| ApiError::BadRequest(format!("package {name} refused: {e}")))?;
            tokio::fs::rename(&tmp, self.path(name)).await.map_err(internal)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }
}
