//! The real kubectl against the real binary: discovery, get (tables, wide,
//! json, yaml, selectors, chunks), describe with events, and errors; plus
//! the list protocol (pages, Tables, errors) over plain HTTP.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

/// `kubectl get nodes -w`, running until dropped; its stdout is piped.
fn watch_nodes(kubectl: &Kubectl) -> tokio::process::Child {
    kubectl
        .command()
        .args(["get", "nodes", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl starts")
}

/// A `kubectl get` table as rows of whitespace-separated cells (header first).
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn row<'a>(rows: &'a [Vec<String>], name: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_and_describes_nodes() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 71, 0, 1)).await;
    let (fleet, dir, db, _nodes) = (&site.fleet, site.dir.path(), &site.db, &site.nodes_file);

    let c = Controller::start(db, &site.args());
    let (a, b, sick) = (fleet.name(0), fleet.name(1), fleet.name(2));
    let a_ip = fleet.fleet.nodes()[0].address.ip().to_string();
    for n in [&a, &b, &sick] {
        c.wait_ready(n, "True").await;
    }
    fleet.handle.set(&sick, KubeletState::Sick).unwrap();
    c.wait_ready(&sick, "False").await;
    let kubectl = Kubectl::new(&c.url, dir);

    // get nodes: the API server's columns, one row per node.
    let table = rows(&kubectl.ok(&["get", "nodes"]).await);
    assert_eq!(table[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(table.len(), 4, "{table:?}");
    assert_eq!(row(&table, &a)[1..3], ["Ready", "<none>"]);
    assert_eq!(row(&table, &sick)[1], "NotReady");

    // -o wide adds the priority-1 columns; the simulated kubelet's address is the InternalIP.
    let wide = kubectl.ok(&["get", "nodes", "-o", "wide"]).await;
    let header = rows(&wide)[0].clone();
    assert_eq!(
        header[5..],
        [
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ]
    );
    let a_line = wide.lines().find(|l| l.starts_with(&a)).unwrap();
    assert!(a_line.contains(&a_ip), "{wide}");

    // -o json and -o yaml: the Node object itself.
    let node: Value = json(&kubectl.ok(&["get", "node", &a, "-o", "json"]).await);
    assert_eq!(node["kind"], "Node");
    assert_eq!(node["apiVersion"], "v1");
    assert_eq!(node["metadata"]["name"], a.as_str());
    assert_eq!(ready_of(&node).as_deref(), Some("True"));
    let yaml = kubectl.ok(&["get", "node", &a, "-o", "yaml"]).await;
    assert!(yaml.contains("kind: Node"), "{yaml}");
    assert!(yaml.contains(&format!("name: {a}")), "{yaml}");
    assert!(yaml.contains(&format!("address: {a_ip}")), "{yaml}");

    // Selectors are applied by the server.
    let hostname = format!("kubernetes.io/hostname={b}");
    let by_label = rows(&kubectl.ok(&["get", "nodes", "-l", &hostname]).await);
    assert_eq!(by_label.len(), 2, "{by_label:?}");
    assert_eq!(by_label[1][0], b);
    let not_b = format!("kubernetes.io/hostname notin ({b}),kubernetes.io/os=linux");
    assert_eq!(
        rows(&kubectl.ok(&["get", "nodes", "-l", &not_b]).await).len(),
        3
    );
    let by_name = format!("metadata.name={b}");
    let by_field = rows(
        &kubectl
            .ok(&["get", "nodes", "--field-selector", &by_name])
            .await,
    );
    assert_eq!(by_field.len(), 2, "{by_field:?}");
    assert_eq!(by_field[1][0], b);
    let (code, _, err) = kubectl
        .run(&["get", "nodes", "--field-selector", "status.phase=Running"])
        .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("field label not supported: status.phase"),
        "{err}"
    );

    // --chunk-size 1: every node, fetched one page at a time with continue tokens.
    let (code, out, err) = kubectl
        .run(&["get", "nodes", "--chunk-size", "1", "-v=6"])
        .await;
    assert_eq!(code, 0, "{err}");
    let chunked = rows(&out);
    assert_eq!(chunked.len(), 4, "{out}");
    for n in [&a, &b, &sick] {
        row(&chunked, n);
    }
    assert_eq!(err.matches("continue=").count(), 2, "{err}");

    // get -w: the list, then a line per change, as Table rows.
    let mut watch = watch_nodes(&kubectl);
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    async fn next_line(
        lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    ) -> String {
        let line = tokio::time::timeout(DEADLINE, lines.next_line())
            .await
            .expect("kubectl prints in time");
        line.unwrap().expect("kubectl -w keeps running")
    }
    assert!(next_line(&mut lines).await.starts_with("NAME"));
    for _ in 0..3 {
        next_line(&mut lines).await;
    }
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    loop {
        let line = next_line(&mut lines).await;
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.first() == Some(&b.as_str()) && cells.get(1) == Some(&"NotReady") {
            break;
        }
    }
    drop(watch);
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    c.wait_ready(&b, "True").await;

    // describe: conditions from the node, events from its history.
    let described = kubectl.ok(&["describe", "node", &sick]).await;
    assert!(described.contains("Conditions:"), "{described}");
    assert!(described.contains("KubeletNotReady"), "{described}");
    assert!(described.contains(&format!(
        "InternalIP:  {}",
        fleet.fleet.nodes()[2].address.ip()
    )));
    let events = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section: {described}"));
    let events = rows(events);
    assert_eq!(events[1], ["Type", "Reason", "Age", "From", "Message"]);
    let warning = events
        .iter()
        .find(|r| r.first().map(String::as_str) == Some("Warning"))
        .unwrap_or_else(|| panic!("no Warning event: {described}"));
    assert_eq!(warning[1], "KubeletNotReady");
    assert_eq!(warning[3], "nodekeeper");
    assert!(events
        .iter()
        .any(|r| r.get(1).map(String::as_str) == Some("Registered")));

    // kubectl get events sees the same history, as a table.
    let involved = format!("involvedObject.name={sick}");
    let events = rows(
        &kubectl
            .ok(&[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                &involved,
            ])
            .await,
    );
    assert_eq!(
        events[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(events
        .iter()
        .any(|r| r.get(2).map(String::as_str) == Some("KubeletNotReady")
            && r.get(3) == Some(&format!("node/{sick}"))));

    // A missing node is the API server's NotFound.
    let (code, _, err) = kubectl.run(&["get", "node", "nope"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains(r#"Error from server (NotFound): nodes "nope" not found"#),
        "{err}"
    );

    assert!(c.stop().success());
    site.stop().await;
}

async fn get(url: &str, accept: &str) -> (u16, Value) {
    let response = client()
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .expect("controller answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_filter_and_print_as_the_api_server_does() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 72, 0, 1)).await;
    let (fleet, db, _nodes) = (&site.fleet, &site.db, &site.nodes_file);

    let c = Controller::start(db, &site.args());
    let names: Vec<String> = (0..3).map(|i| fleet.name(i)).collect();
    for n in &names {
        c.wait_ready(n, "True").await;
    }
    let nodes_url = format!("{}/api/v1/nodes", c.url);

    // Pages of two: a continue token and the count left, then the rest.
    let (status, first) = get(&format!("{nodes_url}?limit=2"), "application/json").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["kind"], "NodeList");
    let page_names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(page_names(&first), names[..2]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().unwrap();
    let (_, second) = get(
        &format!("{nodes_url}?limit=2&continue={token}"),
        "application/json",
    )
    .await;
    assert_eq!(page_names(&second), names[2..]);
    assert!(second["metadata"].get("continue").is_none(), "{second}");
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );

    // A Table, with the object in each row when asked.
    let (_, table) = get(&format!("{nodes_url}?includeObject=Object"), TABLE).await;
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(table["rows"].as_array().unwrap().len(), 3);
    assert_eq!(table["rows"][0]["cells"][0], names[0].as_str());
    assert_eq!(table["rows"][0]["cells"][1], "Ready");
    assert_eq!(table["rows"][0]["object"]["kind"], "Node");
    let (_, one) = get(&format!("{nodes_url}/{}", names[1]), TABLE).await;
    assert_eq!(one["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        one["rows"][0]["object"]["metadata"]["name"],
        names[1].as_str()
    );

    // Errors are Status objects.
    for (query, code, reason, says) in [
        (
            "continue=bogus",
            400,
            "BadRequest",
            "invalid continue token",
        ),
        (
            "labelSelector=a%20in%20(b",
            400,
            "BadRequest",
            "label selector",
        ),
        (
            "fieldSelector=spec.nodeName%3Dx",
            400,
            "BadRequest",
            "field label not supported: spec.nodeName",
        ),
        ("limit=many", 400, "BadRequest", "limit"),
        ("includeObject=All", 400, "BadRequest", "includeObject"),
    ] {
        let (status, body) = get(&format!("{nodes_url}?{query}"), TABLE).await;
        assert_eq!(status, code, "{query}: {body}");
        assert_eq!(body["kind"], "Status", "{query}");
        assert_eq!(body["reason"], reason, "{query}");
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{query}: {body}"
        );
    }

    // `watch` is read as kube-apiserver reads a ListOptions (apimachinery
    // `pkg/apis/meta/v1/zz_generated.conversion.go`,
    // `Convert_url_Values_To_v1_ListOptions`, through
    // `runtime.Convert_Slice_string_To_bool`): absent, `0` or `false` in any
    // case is a list, any other value a watch; none is a 400.
    let (status, list) = get(&format!("{nodes_url}?watch=FALSE"), "application/json").await;
    assert_eq!((status, list["kind"].as_str()), (200, Some("NodeList")));
    let watch = client()
        .get(format!("{nodes_url}?watch=maybe&timeoutSeconds=1"))
        .send()
        .await
        .expect("controller answers");
    assert_eq!(watch.status(), 200);
    let lines = watch.text().await.expect("the watch ends at its timeout");
    let first: Value = serde_json::from_str(lines.lines().next().unwrap_or("")).unwrap();
    assert_eq!(first["type"], "ADDED", "{lines}");

    // Discovery and the objects kubectl describe asks for besides the node.
    let (_, version) = get(&format!("{}/version", c.url), "application/json").await;
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("33"))
    );
    let (_, resources) = get(&format!("{}/api/v1", c.url), "application/json").await;
    assert_eq!(resources["resources"][0]["name"], "nodes");
    let pods_url = format!(
        "{}/api/v1/pods?fieldSelector=spec.nodeName%3D{}%2Cstatus.phase%21%3DSucceeded",
        c.url, names[0]
    );
    let (status, pods) = get(&pods_url, "application/json").await;
    assert_eq!(status, 200);
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["items"], serde_json::json!([]));
    let (status, lease) = get(
        &format!(
            "{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}",
            c.url, names[0]
        ),
        "application/json",
    )
    .await;
    // A probed node's kubelet keeps no Lease: the one its answers renew.
    assert_eq!(status, 200, "{lease}");
    assert_eq!(
        lease["spec"]["holderIdentity"],
        names[0].as_str(),
        "{lease}"
    );

    // Events page too, oldest first; a single one is found by its name.
    let events_url = format!(
        "{}/api/v1/events?fieldSelector=involvedObject.name%3D{}",
        c.url, names[0]
    );
    let (_, events) = get(&events_url, "application/json").await;
    assert_eq!(events["kind"], "EventList");
    let items = events["items"].as_array().unwrap();
    assert_eq!(items[0]["reason"], "Registered");
    assert!(
        items.iter().any(|e| e["reason"] == "KubeletReady"),
        "{events}"
    );
    let name = items[0]["metadata"]["name"].as_str().unwrap();
    let (status, event) = get(
        &format!("{}/api/v1/namespaces/default/events/{name}", c.url),
        "application/json",
    )
    .await;
    assert_eq!(status, 200, "{event}");
    assert_eq!(event, items[0]);
    let (_, paged) = get(&format!("{events_url}&limit=1"), "application/json").await;
    assert_eq!(paged["items"].as_array().unwrap().len(), 1);
    let token = paged["metadata"]["continue"].as_str().unwrap();
    let (_, rest) = get(
        &format!("{events_url}&continue={token}"),
        "application/json",
    )
    .await;
    assert_eq!(rest["items"][0], items[1]);

    assert!(c.stop().success());
    site.stop().await;
}
