//! The `ec2` provider against moto, a real EC2-compatible server, run as a
//! child process. `scripts/test` prepares it (a virtual environment with moto
//! pinned) and names its interpreter in `NODEKEEPER_TEST_PYTHON`; without it
//! the tests use `python3`, and fail saying what to install if moto is not there.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nodekeeper::model::{AddressKind, Resources};
use nodekeeper::source::cloud::{
    anchored, cloud_node_specs, CloudNode, CloudProvider, InstanceState,
};
use nodekeeper::source::ec2::{AwsError, AwsQueryClient, CredentialSource, EC2_API_VERSION};
use nodekeeper::source::provider;

const REGION: &str = "us-east-1";
const KEY: &str = "AKIDNODEKEEPERTEST";
const SECRET: &str = "test-secret";

/// The Python that runs moto: `scripts/test`'s virtual environment, else `python3`.
fn python() -> String {
    std::env::var("NODEKEEPER_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A moto server on 127.0.0.1, killed when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start(env: &[(&str, &str)]) -> Moto {
        let python = python();
        let installed = Command::new(&python)
            .args(["-c", "import moto.server, werkzeug, flask"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            installed,
            "moto's server is not installed for {python}: run the tests with `scripts/test`, \
             which prepares it, or `pip install 'moto[server]'`; the ec2 provider is tested against it"
        );
        let mut child = Command::new(&python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python} does not start: {e}"));
        // Port 0: the server picks a free port and says which on stderr.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("Running on http://").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(rest.trim().trim_end_matches('/').to_string());
                    }
                }
                // Keep draining so the server never blocks on a full pipe.
            }
        });
        let mut moto = Moto {
            child,
            endpoint: String::new(),
        };
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("moto server did not say where it listens within 60s");
        moto.endpoint = format!("http://{addr}");
        moto
    }

    fn client(&self, key: &str, secret: &str) -> AwsQueryClient {
        let credentials = aws_credential_types::Credentials::new(key, secret, None, None, "test");
        AwsQueryClient::new(
            &self.endpoint,
            REGION,
            CredentialSource::Fixed(credentials),
            Duration::from_secs(30),
        )
        .unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Starts one instance (one reservation) with these tags; returns its id.
async fn run_instance(
    api: &AwsQueryClient,
    instance_type: &str,
    zone: &str,
    tags: &[(&str, &str)],
) -> String {
    let mut p = params(&[
        ("ImageId", "ami-12c6146b"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
        ("InstanceType", instance_type),
        ("Placement.AvailabilityZone", zone),
    ]);
    if !tags.is_empty() {
        p.extend(params(&[("TagSpecification.1.ResourceType", "instance")]));
        for (i, (k, v)) in tags.iter().enumerate() {
            p.push((
                format!("TagSpecification.1.Tag.{}.Key", i + 1),
                k.to_string(),
            ));
            p.push((
                format!("TagSpecification.1.Tag.{}.Value", i + 1),
                v.to_string(),
            ));
        }
    }
    let xml = api
        .call("ec2", "RunInstances", EC2_API_VERSION, &p)
        .await
        .expect("RunInstances");
    between(&xml, "<instanceId>", "</instanceId>")
}

fn between(text: &str, open: &str, close: &str) -> String {
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {text}"))
        + open.len();
    let end = start + text[start..].find(close).unwrap();
    text[start..end].to_string()
}

async fn instance_action(api: &AwsQueryClient, action: &str, id: &str) {
    api.call(
        "ec2",
        action,
        EC2_API_VERSION,
        &params(&[("InstanceId.1", id)]),
    )
    .await
    .unwrap_or_else(|e| panic!("{action}: {e}"));
}

/// The provider's config in `dir`: credentials file plus `extra` YAML.
fn config(dir: &Path, endpoint: &str, key: &str, secret: &str, extra: &str) -> PathBuf {
    std::fs::write(
        dir.join("aws.env"),
        format!("AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY={secret}\n"),
    )
    .unwrap();
    let path = dir.join("ec2.yaml");
    std::fs::write(
        &path,
        format!("region: {REGION}\nendpoint: {endpoint}\ncredentialsFile: aws.env\ntimeout: 20s\n{extra}"),
    )
    .unwrap();
    path
}

async fn list(p: &dyn CloudProvider, pattern: &str) -> Result<Vec<CloudNode>, String> {
    cloud_node_specs(p, &anchored(pattern).unwrap(), Resources::default())
        .await
        .map_err(|e| e.to_string())
}

fn names(nodes: &[CloudNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.spec.name.as_str()).collect()
}

fn address(node: &CloudNode, kind: AddressKind) -> Option<&str> {
    node.spec
        .addresses
        .iter()
        .find(|a| a.kind == kind)
        .map(|a| a.address.as_str())
}

#[tokio::test]
async fn tagged_instances_become_nodes() {
    nodekeeper::install_crypto_provider();
    let moto = Moto::start(&[]);
    let api = moto.client(KEY, SECRET);
    let web1 = run_instance(
        &api,
        "t3.small",
        "us-east-1a",
        &[("Name", "Web-1"), ("cluster", "edge")],
    )
    .await;
    let web2 = run_instance(
        &api,
        "t3.medium",
        "us-east-1b",
        &[("Name", "web-2"), ("cluster", "edge")],
    )
    .await;
    let unnamed = run_instance(&api, "t3.micro", "us-east-1a", &[("cluster", "edge")]).await;
    let gone = run_instance(
        &api,
        "t3.micro",
        "us-east-1a",
        &[("Name", "web-9"), ("cluster", "edge")],
    )
    .await;
    run_instance(
        &api,
        "m5.large",
        "us-east-1a",
        &[("Name", "db-1"), ("cluster", "core")],
    )
    .await;
    instance_action(&api, "StopInstances", &web2).await;
    instance_action(&api, "TerminateInstances", &gone).await;

    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        &moto.endpoint,
        KEY,
        SECRET,
        "filters:\n  - {name: 'tag:cluster', values: [edge]}\n",
    );
    let p = provider("ec2", Some(&path)).unwrap();
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(nodes.len(), 3, "{:?}", names(&nodes));

    let w1 = nodes.iter().find(|n| n.spec.name == "web-1").unwrap();
    assert_eq!(w1.spec.external_id, web1);
    assert_eq!(w1.spec.provider_id, format!("aws:///us-east-1a/{web1}"));
    assert_eq!(w1.spec.source, "cloud/ec2");
    assert_eq!(
        w1.spec.labels["node.kubernetes.io/instance-type"],
        "t3.small"
    );
    assert_eq!(w1.spec.labels["topology.kubernetes.io/zone"], "us-east-1a");
    assert_eq!(w1.spec.labels["topology.kubernetes.io/region"], REGION);
    assert_eq!(w1.state, InstanceState::Running);
    assert_eq!(w1.spec.capacity, Resources::default());
    let internal = address(w1, AddressKind::InternalIP).expect("a private IP");
    assert!(internal.parse::<std::net::IpAddr>().is_ok(), "{internal}");
    assert!(address(w1, AddressKind::ExternalIP).is_some());
    assert!(address(w1, AddressKind::InternalDNS).is_some());

    let w2 = nodes.iter().find(|n| n.spec.name == "web-2").unwrap();
    assert_eq!(w2.state, InstanceState::Stopped);
    assert_eq!(w2.spec.labels["topology.kubernetes.io/zone"], "us-east-1b");

    // No Name tag: named by its private DNS name.
    let u = nodes
        .iter()
        .find(|n| n.spec.external_id == unnamed)
        .unwrap();
    assert_eq!(
        Some(u.spec.name.as_str()),
        address(u, AddressKind::InternalDNS),
        "{u:?}"
    );

    // --match selects by the node name.
    assert_eq!(
        names(&list(&*p, "web-.*").await.unwrap()),
        ["web-1", "web-2"]
    );
    assert!(list(&*p, "nothing").await.unwrap().is_empty());

    // Another filter, another set.
    let core = tempfile::tempdir().unwrap();
    let path = config(
        core.path(),
        &moto.endpoint,
        KEY,
        SECRET,
        "filters:\n  - {name: 'tag:cluster', values: [core]}\n  - {name: instance-type, values: [m5.large]}\n",
    );
    let p_core = provider("ec2", Some(&path)).unwrap();
    assert_eq!(names(&list(&*p_core, ".*").await.unwrap()), ["db-1"]);

    // The source fails mid-run: an error, not an empty list.
    drop(moto);
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(
        err.contains("DescribeInstances at http://127.0.0.1:"),
        "{err}"
    );
}

#[tokio::test]
async fn every_page_is_followed_and_too_many_pages_is_an_error() {
    nodekeeper::install_crypto_provider();
    let moto = Moto::start(&[]);
    let api = moto.client(KEY, SECRET);
    for i in 0..12 {
        let name = format!("node-{i:02}");
        run_instance(
            &api,
            "t3.small",
            "us-east-1a",
            &[("Name", &name), ("cluster", "paged")],
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let filters = "filters:\n  - {name: 'tag:cluster', values: [paged]}\n";
    // moto pages by reservation: 12 reservations, 5 a page, 3 pages.
    let path = config(
        dir.path(),
        &moto.endpoint,
        KEY,
        SECRET,
        &format!("{filters}maxResults: 5\n"),
    );
    let p = provider("ec2", Some(&path)).unwrap();
    let nodes = list(&*p, ".*").await.unwrap();
    let expected: Vec<String> = (0..12).map(|i| format!("node-{i:02}")).collect();
    assert_eq!(names(&nodes), expected);

    let path = config(
        dir.path(),
        &moto.endpoint,
        KEY,
        SECRET,
        &format!("{filters}maxResults: 5\nmaxPages: 2\n"),
    );
    let p = provider("ec2", Some(&path)).unwrap();
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(
        err.contains("more than 2 pages") && err.contains("never used"),
        "{err}"
    );
}

#[tokio::test]
async fn requests_are_signed_and_refused_credentials_are_named() {
    nodekeeper::install_crypto_provider();
    // With a finite count, moto checks signatures and IAM policies after
    // that many requests: three to create a user, its key and its policy.
    let moto = Moto::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
    let bootstrap = moto.client(KEY, SECRET);
    let iam = "2010-05-08";
    bootstrap
        .call(
            "iam",
            "CreateUser",
            iam,
            &params(&[("UserName", "nodekeeper")]),
        )
        .await
        .expect("CreateUser");
    let xml = bootstrap
        .call(
            "iam",
            "CreateAccessKey",
            iam,
            &params(&[("UserName", "nodekeeper")]),
        )
        .await
        .expect("CreateAccessKey");
    let key = between(&xml, "<AccessKeyId>", "</AccessKeyId>");
    let secret = between(&xml, "<SecretAccessKey>", "</SecretAccessKey>");
    let policy = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}"#;
    bootstrap
        .call(
            "iam",
            "PutUserPolicy",
            iam,
            &params(&[
                ("UserName", "nodekeeper"),
                ("PolicyName", "ec2"),
                ("PolicyDocument", policy),
            ]),
        )
        .await
        .expect("PutUserPolicy");

    // From here on, moto verifies every SigV4 signature.
    let api = moto.client(&key, &secret);
    run_instance(&api, "t3.small", "us-east-1c", &[("Name", "signed-1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let p = provider(
        "ec2",
        Some(&config(dir.path(), &moto.endpoint, &key, &secret, "")),
    )
    .unwrap();
    assert_eq!(names(&list(&*p, ".*").await.unwrap()), ["signed-1"]);

    let p = provider(
        "ec2",
        Some(&config(
            dir.path(),
            &moto.endpoint,
            &key,
            "not-the-secret",
            "",
        )),
    )
    .unwrap();
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("AuthFailure") && err.contains("401"), "{err}");

    let p = provider(
        "ec2",
        Some(&config(
            dir.path(),
            &moto.endpoint,
            "AKIDUNKNOWN",
            &secret,
            "",
        )),
    )
    .unwrap();
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("AuthFailure"), "{err}");

    match moto
        .client("AKIDUNKNOWN", "x")
        .call("ec2", "DescribeInstances", EC2_API_VERSION, &[])
        .await
    {
        Err(AwsError::Api { code, .. }) => assert_eq!(code, "AuthFailure"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_wrong_endpoint_is_an_error() {
    nodekeeper::install_crypto_provider();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let p = provider("ec2", Some(&config(dir.path(), &endpoint, KEY, SECRET, ""))).unwrap();
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(
        err.contains(&format!("DescribeInstances at {endpoint}")) && err.contains("failed"),
        "{err}"
    );
}
