//! `GET /v1/backup`: a consistent snapshot of the running controller's
//! store, in the export format, as of the newest durable seq when the
//! request came ([`crate::store::Store::export_at`]). It is written on a
//! blocking thread into a channel of a few chunks that the connection drains
//! as the client reads: memory stays bounded whatever the history's length,
//! and heartbeats and writes go on meanwhile. The response says its seq in
//! `X-Nodekeeper-Seq`; a snapshot that fails part-way ends the body with an
//! error (the connection is cut), and an export without its `end` line is
//! refused by `db import`, so a cut backup is never taken for a whole one.

use std::io::Write;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use super::AppState;

/// The bytes one chunk carries, and the chunks queued ahead of the client.
const CHUNK: usize = 256 << 10;
const QUEUED: usize = 8;

/// Hands the export to the connection a chunk at a time; a send that finds
/// the client gone fails the export.
struct ChunkWriter {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

pub(crate) async fn backup(State(s): State<AppState>) -> Response {
    let (tx, rx) = mpsc::channel(QUEUED);
    let (seq_tx, seq_rx) = tokio::sync::oneshot::channel();
    let store = s.store.clone();
    let errors = tx.clone();
    tokio::task::spawn_blocking(move || {
        let seq = store.durable_seq();
        let _ = seq_tx.send(seq);
        let mut out = ChunkWriter {
            tx,
            buffer: Vec::with_capacity(CHUNK),
        };
        match store.export_at(seq, &mut out) {
            Ok((counts, seq)) => {
                tracing::info!(
                    seq,
                    events = counts.events,
                    nodes = counts.nodes,
                    "backup sent"
                );
            }
            Err(e) => {
                tracing::warn!("backup failed: {e}");
                let _ = errors.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let seq = seq_rx.await.unwrap_or_default();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/jsonl"),
    );
    headers.insert("x-nodekeeper-seq", HeaderValue::from(seq));
    response
}
