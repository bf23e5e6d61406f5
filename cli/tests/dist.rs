//! What `dist/` ships, checked against the binary it ships: the man pages
//! are the CLI's own, the systemd unit verifies and is hardened, and the
//! container recipe and Kubernetes manifest name flags, paths and ports the
//! binary has.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nodekeeper");
/// The repository's top: these tests live in cli/.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn dist(path: &str) -> PathBuf {
    Path::new(REPO).join("dist").join(path)
}

/// `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist` rewrites the generated
/// files instead of failing on them.
fn updating() -> bool {
    std::env::var_os("NODEKEEPER_UPDATE_DIST").is_some_and(|v| v == "1")
}

/// The man pages rendered from the CLI definition: `nodekeeper.1` and one
/// page per subcommand (`nodekeeper-run.1`, `nodekeeper-db-status.1` …).
fn rendered_man_pages(dir: &Path) {
    clap_mangen::generate_to(nodekeeper::commands::completions::documented_command(), dir).unwrap();
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(name, _)| name.ends_with(".1"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_committed_man_pages_are_the_cli_s() {
    let fresh = tempfile::tempdir().unwrap();
    rendered_man_pages(fresh.path());
    let committed = dist("man");
    if updating() {
        std::fs::create_dir_all(&committed).unwrap();
        for (name, _) in files_in(&committed) {
            std::fs::remove_file(committed.join(name)).unwrap();
        }
        rendered_man_pages(&committed);
    }
    let want = files_in(fresh.path());
    let have = if committed.is_dir() {
        files_in(&committed)
    } else {
        Vec::new()
    };
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&have),
        names(&want),
        "dist/man does not have a page for every subcommand; regenerate it with `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist`"
    );
    for ((name, have), (_, want)) in have.iter().zip(&want) {
        assert!(
            have == want,
            "dist/man/{name} is out of date with the CLI; regenerate it with `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist`"
        );
    }
    let (_, top) = want
        .iter()
        .find(|(name, _)| name == "nodekeeper.1")
        .unwrap();
    let top = String::from_utf8_lossy(top);
    // The top page leads to the subcommands' pages.
    assert!(top.contains("nodekeeper\\-run(1)"), "{top}");
}

#[test]
fn completions_come_from_the_binary() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("node-sync-period"), "{shell}");
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bash") && err.contains("zsh") && err.contains("fish"),
        "{err}"
    );
}

// --- systemd -------------------------------------------------------------

const UNIT: &str = "systemd/nodekeeper.service";
/// `systemd-analyze security`'s overall exposure the unit must stay within
/// (0 is the most locked down, 10 the least; up to 2.0 is "OK").
const MAX_EXPOSURE: f64 = 2.0;

/// `systemd-analyze`; a test that needs it fails, saying what to install,
/// when it is missing.
fn systemd_analyze() -> &'static str {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "systemd-analyze is not installed: install it (Debian: apt-get install systemd; \
         scripts/test installs it when run as root)"
    );
    "systemd-analyze"
}

/// The unit as installed next to the built binary: the same file with
/// ExecStart pointing at this build, so `verify` checks a command that exists.
fn unit_for_this_build(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    assert_eq!(
        unit.matches("ExecStart=/usr/local/bin/nodekeeper ").count(),
        1,
        "ExecStart runs /usr/local/bin/nodekeeper, as the README and docs/guide/install.md install it"
    );
    let path = dir.join("nodekeeper.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/local/bin/nodekeeper ",
            &format!("ExecStart={BIN} "),
        ),
    )
    .unwrap();
    path
}

/// What the unit's ExecStart runs, as arguments.
fn exec_start() -> Vec<String> {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn the_systemd_unit_verifies() {
    let analyze = systemd_analyze();
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    // Documentation=man:nodekeeper(1) is checked against the shipped page,
    // where man(1) is there to look it up.
    let man = dir.path().join("man");
    std::fs::create_dir_all(man.join("man1")).unwrap();
    std::fs::copy(dist("man/nodekeeper.1"), man.join("man1/nodekeeper.1")).unwrap();
    assert!(
        Command::new("man").arg("--version").output().is_ok(),
        "man is not installed, and Documentation=man:nodekeeper(1) is looked up with it: \
         install it (Debian: apt-get install man-db; scripts/test installs it when run as root)"
    );
    let out = Command::new(analyze)
        .arg("verify")
        .arg("--man=yes")
        .arg(&unit)
        .env("MANPATH", &man)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    // Unknown keys and bad values are only warned about: none may be.
    assert!(
        !stderr.contains("nodekeeper.service"),
        "systemd-analyze verify warns about the unit: {stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let analyze = systemd_analyze();
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    let out = Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for nodekeeper.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level in: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        exposure <= MAX_EXPOSURE,
        "exposure {exposure} is above {MAX_EXPOSURE}:\n{text}"
    );
}

#[test]
fn the_systemd_unit_runs_what_the_binary_takes() {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    for line in [
        "Type=notify",
        "Restart=on-failure",
        "DynamicUser=yes",
        "StateDirectory=nodekeeper",
        "ConfigurationDirectory=nodekeeper",
        "ProtectSystem=strict",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    // WatchdogSec must leave room for the pings, sent every half of it.
    assert!(unit.lines().any(|l| l.starts_with("WatchdogSec=")));
    let nofile: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .unwrap()
        .parse()
        .unwrap();
    // 10,000 kubelets probed and pushing hold two connections each.
    assert!(nofile >= 2 * 10_000 + 512, "LimitNOFILE={nofile}");
    let args = exec_start();
    assert_eq!(args[0], "/usr/local/bin/nodekeeper");
    let db = args.iter().position(|a| a == "--db").unwrap();
    assert!(
        args[db + 1].starts_with("/var/lib/nodekeeper/"),
        "--db under the StateDirectory"
    );
    let config = args.iter().position(|a| a == "--config").unwrap();
    assert_eq!(args[config + 1], "/etc/nodekeeper/config.yaml");
    // The README's example config is the file the unit reads.
    let readme = std::fs::read_to_string(format!("{REPO}/README.md")).unwrap();
    assert!(
        readme.contains(&format!("```yaml\n# {}\n", args[config + 1])),
        "the README's example config is not named {}",
        args[config + 1]
    );
    // The binary takes these arguments: `config print` parses the same
    // command line as `run` (with a config file of our own).
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, "node-sync-period: 10s\n").unwrap();
    let mut print: Vec<String> = args[1..].to_vec();
    let run = print.iter().position(|a| a == "run").unwrap();
    print.splice(run..=run, ["config".to_string(), "print".to_string()]);
    print[config + 1] = config_file.to_string_lossy().into_owned();
    let out = Command::new(BIN).args(&print).output().unwrap();
    assert!(
        out.status.success(),
        "{print:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// --- the container and the Kubernetes manifest ------------------------------

const MANIFEST: &str = "kubernetes/nodekeeper.yaml";

/// Every document of the manifest, as JSON.
fn manifest_documents() -> Vec<serde_json::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(dist(MANIFEST)).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            let yaml = serde_yaml_ng::Value::deserialize(doc).unwrap();
            serde_json::to_value(yaml).unwrap()
        })
        .collect()
}

/// `doc` read into its typed Kubernetes struct and written back: a field the
/// struct does not know (a typo, a wrong level) is lost, and fails here.
fn typed_round_trip<T>(doc: &serde_json::Value)
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", doc["kind"], doc["metadata"]["name"]));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, doc,
        "{} {} loses or changes fields when read as its Kubernetes type",
        doc["kind"], doc["metadata"]["name"]
    );
}

fn document<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the manifest has no {kind} {name}"))
}

#[test]
fn every_manifest_document_is_a_kubernetes_object_without_unknown_fields() {
    use k8s_openapi::api::{apps, core, rbac};
    let docs = manifest_documents();
    let mut kinds = Vec::new();
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap();
        match (doc["apiVersion"].as_str().unwrap(), kind) {
            ("v1", "Namespace") => typed_round_trip::<core::v1::Namespace>(doc),
            ("v1", "ServiceAccount") => typed_round_trip::<core::v1::ServiceAccount>(doc),
            ("v1", "ConfigMap") => typed_round_trip::<core::v1::ConfigMap>(doc),
            ("v1", "Service") => typed_round_trip::<core::v1::Service>(doc),
            ("apps/v1", "StatefulSet") => typed_round_trip::<apps::v1::StatefulSet>(doc),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                typed_round_trip::<rbac::v1::ClusterRole>(doc)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                typed_round_trip::<rbac::v1::ClusterRoleBinding>(doc)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => typed_round_trip::<rbac::v1::Role>(doc),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                typed_round_trip::<rbac::v1::RoleBinding>(doc)
            }
            (api, kind) => panic!("the test knows no {api} {kind}: add it"),
        }
        kinds.push(kind.to_string());
    }
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "StatefulSet",
        "Service",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "the manifest has no {kind}"
        );
    }
}

#[test]
fn a_typo_in_the_manifest_is_caught() {
    let mut docs = manifest_documents();
    let set = docs
        .iter_mut()
        .find(|d| d["kind"] == "StatefulSet")
        .unwrap();
    let probe = &mut set["spec"]["template"]["spec"]["containers"][0]["readinessProbe"];
    probe["httpGet"]["pth"] = probe["httpGet"]["path"].take();
    let set = set.clone();
    let caught = std::panic::catch_unwind(|| {
        typed_round_trip::<k8s_openapi::api::apps::v1::StatefulSet>(&set)
    });
    assert!(caught.is_err());
}

/// (group, resource, sorted verbs) of every rule of an RBAC object.
fn rbac_rules(object: &serde_json::Value) -> Vec<(String, String, Vec<String>)> {
    let strings =
        |v: &serde_json::Value| -> Vec<String> { serde_json::from_value(v.clone()).unwrap() };
    let mut rules = Vec::new();
    for rule in object["rules"].as_array().unwrap() {
        let mut verbs = strings(&rule["verbs"]);
        verbs.sort();
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                rules.push((group.clone(), resource, verbs.clone()));
            }
        }
    }
    rules.sort();
    rules
}

/// The ClusterRole the mirror guide gives: the permissions the mirror's
/// calls need, kept with the mirror's code.
fn guide_cluster_role() -> serde_json::Value {
    let guide = std::fs::read_to_string(Path::new(REPO).join("docs/guide/mirror.md")).unwrap();
    let after = guide
        .split("The account nodekeeper uses needs these permissions (RBAC):")
        .nth(1)
        .expect("docs/guide/mirror.md gives the mirror's RBAC");
    let block = after
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    serde_json::to_value(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(block).unwrap()).unwrap()
}

/// The manifest grants what the mirror calls, as the mirror guide lists it
/// (nodes get, list, watch, create, patch, delete; nodes/status patch; pods
/// list, delete; Leases get, create, update, delete), and nothing else; the
/// Leases only in `kube-node-lease` and the leader Lease's namespace.
#[test]
fn rbac_grants_exactly_what_the_mirror_calls() {
    let docs = manifest_documents();
    let guide = rbac_rules(&guide_cluster_role());
    let (leases, core): (Vec<_>, Vec<_>) = guide
        .into_iter()
        .partition(|(group, _, _)| group == "coordination.k8s.io");
    assert_eq!(
        rbac_rules(document(&docs, "ClusterRole", "nodekeeper")),
        core
    );
    assert!(
        core.iter()
            .all(|(_, _, verbs)| !verbs.iter().any(|v| v == "*")),
        "{core:?}"
    );
    let [(_, resource, lease_verbs)] = leases.as_slice() else {
        panic!("the guide's RBAC has one rule for Leases: {leases:?}")
    };
    assert_eq!(resource, "leases");

    // Node Leases: everything the guide grants on Leases.
    let node_leases = document(&docs, "Role", "nodekeeper-node-leases");
    assert_eq!(node_leases["metadata"]["namespace"], "kube-node-lease");
    assert_eq!(
        rbac_rules(node_leases),
        [(
            "coordination.k8s.io".to_string(),
            "leases".to_string(),
            lease_verbs.clone()
        )]
    );
    // The leader Lease, where config.yaml keeps it: taken and renewed by
    // replacing it, never deleted.
    let config = configmap_config(&docs);
    let leader = document(&docs, "Role", "nodekeeper-leader");
    assert_eq!(
        leader["metadata"]["namespace"].as_str(),
        config["leader-elect-resource-namespace"].as_str()
    );
    let leader_verbs: Vec<String> = lease_verbs
        .iter()
        .filter(|v| *v != "delete")
        .cloned()
        .collect();
    assert_eq!(
        rbac_rules(leader),
        [(
            "coordination.k8s.io".to_string(),
            "leases".to_string(),
            leader_verbs
        )]
    );
    // Each role is bound to the pod's service account.
    let account = &document(&docs, "StatefulSet", "nodekeeper")["spec"]["template"]["spec"]
        ["serviceAccountName"];
    for (kind, name) in [
        ("ClusterRoleBinding", "nodekeeper"),
        ("RoleBinding", "nodekeeper-node-leases"),
        ("RoleBinding", "nodekeeper-leader"),
    ] {
        let binding = document(&docs, kind, name);
        assert_eq!(binding["roleRef"]["name"], binding["metadata"]["name"]);
        assert_eq!(&binding["subjects"][0]["name"], account);
        assert_eq!(binding["subjects"][0]["namespace"], "nodekeeper");
    }
}

/// The ConfigMap's config.yaml, parsed.
fn configmap_config(docs: &[serde_json::Value]) -> serde_json::Value {
    let text = document(docs, "ConfigMap", "nodekeeper")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    serde_json::to_value(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).unwrap()).unwrap()
}

/// The ConfigMap's files written out as the pod sees them, under `dir`.
fn write_configmap(docs: &[serde_json::Value], dir: &Path) {
    for (name, text) in document(docs, "ConfigMap", "nodekeeper")["data"]
        .as_object()
        .unwrap()
    {
        let mut text = text.as_str().unwrap().to_string();
        if name == "config.yaml" {
            text = with_stand_ins(&text, dir);
        }
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// `config.yaml` with each absolute path it names (files other volumes
/// mount, such as the serving Secret's) moved under `dir/mounted/`, where
/// an empty stand-in is made: `config print` checks that the files exist.
/// That they are mounted where the config says is checked apart.
fn with_stand_ins(config: &str, dir: &Path) -> String {
    config
        .lines()
        .map(|line| match line.split_once(": /") {
            Some((key, path)) => {
                let stand_in = dir.join("mounted").join(path);
                std::fs::create_dir_all(stand_in.parent().unwrap()).unwrap();
                std::fs::write(&stand_in, "").unwrap();
                format!("{key}: {}\n", stand_in.display())
            }
            None => format!("{line}\n"),
        })
        .collect()
}

#[test]
fn the_configmap_is_a_valid_config_and_the_probes_follow_it() {
    let docs = manifest_documents();
    let config = configmap_config(&docs);
    let set = document(&docs, "StatefulSet", "nodekeeper");
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();

    // `config print` reads the ConfigMap's config.yaml with the container's
    // arguments: every key is one `run` takes, every value one it accepts.
    let dir = tempfile::tempdir().unwrap();
    write_configmap(&docs, dir.path());
    let at = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
    let config_path = at("--config");
    let mut print = args.clone();
    let run = print.iter().position(|a| a == "run").unwrap();
    print.splice(run..=run, ["config".to_string(), "print".to_string()]);
    let config_at = print.iter().position(|a| a == "--config").unwrap() + 1;
    print[config_at] = dir
        .path()
        .join("config.yaml")
        .to_string_lossy()
        .into_owned();
    let out = Command::new(BIN).args(&print).output().unwrap();
    assert!(
        out.status.success(),
        "the ConfigMap's config.yaml is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its nodes file too.
    let nodes_file = dir.path().join(config["nodes-file"].as_str().unwrap());
    let nodes = nodekeeper::source::static_list::read_nodes_file(
        &nodes_file.to_string_lossy(),
        nodekeeper::model::Resources {
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
        },
    )
    .unwrap();
    assert!(!nodes.is_empty());

    // The files are where the arguments and the config say.
    let mounts = container["volumeMounts"].as_array().unwrap();
    let mounted = |path: &str| {
        mounts
            .iter()
            .filter(|m| Path::new(path).starts_with(m["mountPath"].as_str().unwrap()))
            .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
            .unwrap_or_else(|| panic!("nothing is mounted at {path}"))["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let volume = |name: &str| {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
    };
    assert_eq!(
        volume(&mounted(&config_path)).unwrap()["configMap"]["name"],
        "nodekeeper"
    );
    assert_eq!(Path::new(&config_path).file_name().unwrap(), "config.yaml");
    let db = at("--db");
    let data = mounted(&db);
    assert!(volume(&data).is_none(), "--db is on the claim");
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        data.as_str()
    );
    for key in ["tls-cert-file", "tls-private-key-file", "token-file"] {
        let path = config[key].as_str().unwrap();
        let secret = volume(&mounted(path)).unwrap();
        let file = Path::new(path).file_name().unwrap().to_str().unwrap();
        assert_eq!(
            secret["secret"]["secretName"], "nodekeeper-serving",
            "{key}"
        );
        assert!(
            dist_text(MANIFEST).contains(&format!("--from-file={file}")),
            "the manifest says how to make {file}"
        );
    }

    // The probes reach the API where `listen` serves it, in its scheme.
    let listen: std::net::SocketAddr = config["listen"].as_str().unwrap().parse().unwrap();
    let scheme = if config.get("tls-cert-file").is_some() {
        "HTTPS"
    } else {
        "HTTP"
    };
    for (probe, path) in [
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/livez"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(get["port"], listen.port(), "{probe}");
        assert_eq!(get["scheme"], scheme, "{probe}");
    }
    assert_eq!(container["ports"][0]["containerPort"], listen.port());
    let service = document(&docs, "Service", "nodekeeper");
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"],
        container["ports"][0]["name"]
    );
    assert_eq!(
        service["spec"]["selector"],
        set["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(set["spec"]["replicas"], 1, "one controller per store");
}

fn dist_text(path: &str) -> String {
    std::fs::read_to_string(dist(path)).unwrap()
}

/// A Dockerfile instruction's JSON-array form (`ENTRYPOINT ["…"]`).
fn dockerfile_array(dockerfile: &str, instruction: &str) -> Vec<String> {
    let line = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{instruction} ")))
        .unwrap_or_else(|| panic!("the Dockerfile has no {instruction}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn the_dockerfile_runs_what_the_manifest_and_the_cli_expect() {
    let dockerfile = std::fs::read_to_string(Path::new(REPO).join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("cargo build --release --locked"));
    let entrypoint = dockerfile_array(&dockerfile, "ENTRYPOINT");
    let cmd = dockerfile_array(&dockerfile, "CMD");
    assert_eq!(entrypoint.len(), 1);
    assert!(
        dockerfile.contains(&format!("COPY --from=builder {0} {0}", entrypoint[0])),
        "the runtime image has the binary where ENTRYPOINT runs it"
    );
    let docs = manifest_documents();
    let set = document(&docs, "StatefulSet", "nodekeeper");
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    // A versioned tag, the crate's version, in the manifest and the Dockerfile's usage.
    let image = format!("nodekeeper:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(container["image"], image.as_str());
    assert!(
        dockerfile.contains(&format!("docker build -t {image} .")),
        "the Dockerfile builds {image}"
    );
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    assert_eq!(cmd, args, "the manifest runs the image's own command");
    assert!(
        container.get("command").is_none(),
        "the image's ENTRYPOINT is used"
    );
    // A non-root user, the one the pod runs as, with the store on the volume.
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert_eq!(
        user,
        format!(
            "{}:{}",
            pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
        )
    );
    assert_ne!(user.split(':').next(), Some("0"));
    let volume = dockerfile_array(&dockerfile, "VOLUME").pop();
    let volume = volume.unwrap_or_default();
    let db = &cmd[cmd.iter().position(|a| a == "--db").unwrap() + 1];
    assert!(
        Path::new(db).starts_with(&volume),
        "--db {db} is on VOLUME {volume}"
    );
    let config = configmap_config(&docs);
    let listen: std::net::SocketAddr = config["listen"].as_str().unwrap().parse().unwrap();
    assert!(
        dockerfile
            .lines()
            .any(|l| l == format!("EXPOSE {}", listen.port())),
        "EXPOSE is the port config.yaml listens on"
    );
    // The binary takes the image's command line (as `config print`).
    let dir = tempfile::tempdir().unwrap();
    write_configmap(&docs, dir.path());
    let mut print = cmd.clone();
    let run = print.iter().position(|a| a == "run").unwrap();
    print.splice(run..=run, ["config".to_string(), "print".to_string()]);
    let config_at = print.iter().position(|a| a == "--config").unwrap() + 1;
    print[config_at] = dir
        .path()
        .join("config.yaml")
        .to_string_lossy()
        .into_owned();
    let out = Command::new(BIN).args(&print).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
