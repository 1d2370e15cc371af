//! Two processes of one node share one store: one count of the shared memory in use, files
//! one hands the other, and the rules for freed files across processes (a file another
//! process maps is never kept for reuse; files kept by a process that died are reclaimed by
//! the next one short of room). The second process is this test binary run again.

use oxray_object_store::NodeStore;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const CAPACITY: u64 = 10_000;
const CHILD_DIR: &str = "OXRAY_STORE_TEST_DIR";

fn open(root: &Path) -> NodeStore {
    NodeStore::open(&root.join("shm"), &root.join("spill"), CAPACITY).unwrap()
}

fn kept_files(root: &Path) -> Vec<String> {
    let names = std::fs::read_dir(root.join("shm")).unwrap().flatten().map(|e| e.file_name().into_string().unwrap());
    names.filter(|n| n.starts_with(".kept-")).collect()
}

/// The other process: only when the parent test runs it.
#[test]
fn child() {
    let Ok(root) = std::env::var(CHILD_DIR) else { return };
    let root = Path::new(&root);
    let store = open(root);
    let mut out = std::io::stdout();
    writeln!(out, "used {}", store.used()).unwrap();
    // An object it makes and frees while nobody maps it: kept for this process's reuse.
    let mine = store.create("c", 2_000, false).unwrap();
    assert!(mine.in_memory);
    writeln!(out, "used {}", store.used()).unwrap();
    store.delete(&mine);
    assert_eq!(kept_files(root).len(), 1);
    // It maps the parent's object (a reader holds a shared lock for as long as it maps).
    let parents = std::fs::File::open(root.join("shm").join("p")).unwrap();
    parents.lock_shared().unwrap();
    writeln!(out, "mapped").unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    // Dies without letting go of its kept file, as a killed process does.
    std::process::exit(0);
}

#[test]
fn two_processes_share_the_count_and_the_rules_for_freed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let store = open(root);
    let p = store.create("p", 4_000, false).unwrap();
    std::fs::write(&p.path, vec![7u8; 4_000]).unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines().map_while(Result::ok);
    // The test harness may print on the same line before the child's first words.
    let mut said = |what: &str| {
        let line = lines.find(|l| l.contains(what)).unwrap_or_else(|| panic!("child never said {what}"));
        line[line.find(what).unwrap()..].to_string()
    };
    assert_eq!(said("used"), "used 4000", "the child sees the parent's object");
    assert_eq!(said("used"), "used 6000", "and counts its own in the same place");
    said("mapped");
    assert_eq!(store.used(), 4_000, "the child's freed file is kept, not in use");

    // The parent frees an object the child maps: removed at once, never kept for reuse.
    store.delete(&p);
    assert!(!p.path.exists());
    assert_eq!(kept_files(root).len(), 1, "only the child's");
    assert_eq!(store.used(), 0);

    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());

    // Short of room, the parent reclaims what the dead child kept.
    let big = store.create("big", 9_000, false).unwrap();
    assert!(big.in_memory, "the dead child's kept file made room");
    assert!(kept_files(root).is_empty());
    assert_eq!(store.used(), 9_000);
}
