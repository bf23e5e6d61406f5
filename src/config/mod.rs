//! `run`'s configuration, in one place: the `--config` file read into
//! flags (`file.rs`), every flag validated into a [`RunConfig`] before a
//! port is bound or the store opened (`run.rs`), and the HTTP API sized to
//! the open files the process may hold (`sizing.rs`).

mod file;
mod run;
mod sizing;

pub use file::{
    check_files, command, parse_args, print, ConfigError, Origin, Setting, MAX_CONFIG_BYTES,
    MAX_CONFIG_NESTING,
};
pub use run::{RunConfig, RunError};
pub use sizing::{
    raise_open_file_limit, size_api, ApiSizing, SizingError, SizingInput, READER_CONNECTIONS,
    SPARE_FILES,
};
