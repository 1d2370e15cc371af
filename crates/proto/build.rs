fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        root.join("oxray/v1/head.proto"),
        root.join("oxray/v1/agent.proto"),
        root.join("oxray/v1/worker.proto"),
        root.join("ray/rpc/gcs_compat.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    tonic_prost_build::configure().compile_protos(&files, &[root])?;
    Ok(())
}
