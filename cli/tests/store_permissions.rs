//! Inspecting a stopped store as a user other than its owner, with the real
//! binary run as `nobody`: a store the user may read but not write is read
//! (nodes, describe, history, at, db status, db verify) from a copy and left
//! as it was, and changes to it are refused; a store the user may not read
//! is reported as such, not as missing. Switching users needs root: without
//! it the test fails and says so (CI runs the tests as root).
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;

/// `nodekeeper --db DB ARGS` as the user nobody (uid and gid 65534), with
/// its temporary files in `tmp`: (exit code, stdout, stderr).
fn as_nobody(db: &Path, tmp: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .expect("setpriv(1) runs (Debian: util-linux)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sets `path` and everything under it readable by all and writable by its owner only.
fn read_only_to_others(path: &Path) {
    let meta = std::fs::metadata(path).unwrap();
    let mode = if meta.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            read_only_to_others(&entry.unwrap().path());
        }
    }
}

/// Every file under `path` with its bytes, to tell that nothing changed.
fn contents(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            all.extend(contents(&p));
        } else {
            all.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_this_user_may_only_read_is_read_from_a_copy_and_one_it_may_not_is_named() {
    let uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "this test runs the binary as another user, which needs root: run the tests as root \
         (scripts/test does in CI), with setpriv(1) installed (Debian: util-linux)"
    );
    let site = TestSite::named(&["ro-a", "ro-b"], Ipv4Addr::new(127, 160, 4, 1)).start();
    let c = site.controller(&[]);
    c.wait_for("/api/v1/nodes", "both nodes registered", |l| {
        l["items"].as_array().is_some_and(|i| i.len() == 2)
    })
    .await;
    assert!(c.stop().success());
    let db = site.db.clone();
    let tmp = site.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).unwrap();

    // The site's directory is its owner's alone: the store cannot be looked at.
    std::fs::set_permissions(site.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, _, err) = as_nobody(&db, &tmp, &["nodes"]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("no store at"), "{err}");
    assert!(
        err.contains(&format!(
            "cannot read the store at {}: Permission denied",
            db.display()
        )),
        "{err}"
    );

    // The way to it is open, but the store's own directory is its owner's
    // alone: not readable either, and not taken for one to copy.
    std::fs::set_permissions(site.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, _, err) = as_nobody(&db, &tmp, &["db", "status"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot read the store at {}: Permission denied",
            db.display()
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "a copy was left"
    );

    // Readable by all, writable by its owner only.
    read_only_to_others(site.path());
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).unwrap();
    let before = contents(&db);
    let read = |args: &[&str]| {
        let (code, out, err) = as_nobody(&db, &tmp, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            err.contains("may read the store") && err.contains("reading a copy"),
            "{args:?} says it reads a copy: {err}"
        );
        out
    };
    let nodes = read(&["nodes", "-o", "json"]);
    assert_eq!(
        json(&nodes)["items"].as_array().unwrap().len(),
        2,
        "{nodes}"
    );
    assert!(read(&["describe", "ro-a"]).contains("Name:               ro-a"));
    let history = json(&read(&["history", "ro-b", "-o", "json"]));
    assert_eq!(history[0]["kind"], "Registered", "{history}");
    let at = json(&read(&["at", "0s", "-o", "json"]));
    assert_eq!(at["items"].as_array().unwrap().len(), 2, "{at}");
    let status = read(&["db", "status"]);
    assert!(
        status.contains(&format!("Path:           {}\n", db.display())),
        "the store's own path, not the copy's: {status}"
    );
    assert!(status.contains("Nodes:          2"), "{status}");
    assert!(read(&["db", "verify"]).contains("ok: every record reads back"));

    // A change would be made to the copy and lost: refused.
    let (code, _, err) = as_nobody(&db, &tmp, &["cordon", "ro-a"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("read-only to this user"), "{err}");

    // The store is as it was, and no copy is left behind.
    assert_eq!(contents(&db), before, "the store changed");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "a copy was left"
    );
}
