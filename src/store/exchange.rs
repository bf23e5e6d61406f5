//! Export and import as JSON lines, independent of sled and of the schema:
//! a header line, then every node record, then every event in seq order.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use super::{records, seq_from_key, Store, StoreError};
use crate::model::{Event, Micros, Node};

const FORMAT: &str = "nodekeeper-export";
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    format: String,
    version: u32,
    exported_at: Micros,
    last_seq: u64,
    nodes: usize,
    events: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Line {
    Node(Box<Node>),
    Event(Box<Event>),
}

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportSummary {
    pub nodes: usize,
    pub events: usize,
}

/// What an import loaded.
#[derive(Debug, Clone, Serialize)]
pub struct ImportSummary {
    pub nodes: usize,
    pub events: usize,
    #[serde(rename = "lastSeq")]
    pub last_seq: u64,
}

pub(super) fn export(store: &Store, out: &mut dyn Write) -> Result<ExportSummary, StoreError> {
    let header = Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        exported_at: Micros::now(),
        last_seq: store.last_seq(),
        nodes: store.nodes.len(),
        events: store.events.len(),
    };
    let write_line = |out: &mut dyn Write, value: &dyn erased::Json| -> Result<(), StoreError> {
        value.write(out).map_err(StoreError::Export)?;
        out.write_all(b"\n").map_err(StoreError::Export)
    };
    write_line(out, &header)?;
    let mut summary = ExportSummary {
        nodes: 0,
        events: 0,
    };
    for value in store.nodes.iter().values() {
        let node = records::decode_node(&value?)?;
        write_line(out, &Line::Node(Box::new(node)))?;
        summary.nodes += 1;
    }
    for entry in store.events.iter() {
        let (key, value) = entry?;
        let event = records::decode_event(seq_from_key(&key)?, &value)?;
        write_line(out, &Line::Event(Box::new(event)))?;
        summary.events += 1;
    }
    out.flush().map_err(StoreError::Export)?;
    Ok(summary)
}

pub(super) fn import(store: &Store, input: &mut dyn BufRead) -> Result<ImportSummary, StoreError> {
    if !store.is_empty() {
        return Err(StoreError::NotEmpty(store.path.clone()));
    }
    match load(store, input) {
        Ok(summary) => {
            store.flush_blocking()?;
            Ok(summary)
        }
        Err(e) => {
            // The store was empty before; leave it so rather than half-loaded.
            store.clear()?;
            Err(e)
        }
    }
}

fn load(store: &Store, input: &mut dyn BufRead) -> Result<ImportSummary, StoreError> {
    let mut summary = ImportSummary {
        nodes: 0,
        events: 0,
        last_seq: 0,
    };
    let mut nodes = sled::Batch::default();
    let mut events = sled::Batch::default();
    let mut index = sled::Batch::default();
    let mut pending = 0usize;
    let mut line = String::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = input.read_line(&mut line).map_err(|e| StoreError::Import {
            line: number + 1,
            reason: e.to_string(),
        })?;
        if read == 0 {
            break;
        }
        number += 1;
        let bad = |reason: String| StoreError::Import {
            line: number,
            reason,
        };
        if line.trim().is_empty() {
            continue;
        }
        if number == 1 {
            let header: Header = serde_json::from_str(&line)
                .map_err(|e| bad(format!("not a nodekeeper export header ({e}); was this made by `nodekeeper db export`?")))?;
            if header.format != FORMAT || header.version > FORMAT_VERSION {
                return Err(bad(format!(
                    "format {:?} version {} is not one this build reads ({FORMAT} up to {FORMAT_VERSION})",
                    header.format, header.version
                )));
            }
            continue;
        }
        match serde_json::from_str::<Line>(&line).map_err(|e| bad(e.to_string()))? {
            Line::Node(node) => {
                nodes.insert(node.name.as_bytes(), records::encode_node(&node));
                summary.nodes += 1;
            }
            Line::Event(event) => {
                if event.seq <= summary.last_seq {
                    return Err(bad(format!(
                        "event seq {} does not follow {}",
                        event.seq, summary.last_seq
                    )));
                }
                summary.last_seq = event.seq;
                if let Some(node) = &event.node {
                    index.insert(
                        migrations::v2_node_index::index_key(node, event.seq),
                        &[] as &[u8],
                    );
                }
                events.insert(&event.seq.to_be_bytes(), records::encode_event(&event));
                summary.events += 1;
            }
        }
        pending += 1;
        if pending >= 10_000 {
            store.nodes.apply_batch(std::mem::take(&mut nodes))?;
            store.events.apply_batch(std::mem::take(&mut events))?;
            store.node_events.apply_batch(std::mem::take(&mut index))?;
            pending = 0;
        }
    }
    if number == 0 {
        return Err(StoreError::Import {
            line: 0,
            reason: "the input is empty".into(),
        });
    }
    store.nodes.apply_batch(nodes)?;
    store.events.apply_batch(events)?;
    store.node_events.apply_batch(index)?;
    *store.lock_writer() = summary.last_seq;
    Ok(summary)
}

/// Serializing through `&dyn` without boxing every line.
mod erased {
    pub trait Json {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()>;
    }
    impl<T: serde::Serialize> Json for T {
        fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(out, self).map_err(std::io::Error::other)
        }
    }
}
