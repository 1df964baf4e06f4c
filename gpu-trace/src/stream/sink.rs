//! Where watch's lines go: stdout, or a file that logrotate may move away
//! (SIGHUP reopens it). Lines are written whole, a batch per write, so a
//! reader never sees half a line from us; a failing write (a full disk, a
//! file that became unwritable) is reported at most once a minute while
//! the events keep being counted.
//!
//! gpu-trace runs as root: the file is opened without following a symlink
//! and must be a regular file owned by root, so whoever can write to the
//! log's directory cannot point our writes at another file.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

const REPORT_EVERY: Duration = Duration::from_secs(60);

pub struct Sink {
    file: Option<(PathBuf, File)>,
    /// Complete lines waiting for the next flush.
    batch: Vec<u8>,
    /// Lines that could not be written since the last report.
    unwritten: u64,
    /// SIGHUPs whose reopen failed (writing went on to the old file).
    failed_reopens: u64,
    last_report: Option<Instant>,
}

impl Sink {
    pub fn stdout() -> Self {
        Self {
            file: None,
            batch: Vec::new(),
            unwritten: 0,
            failed_reopens: 0,
            last_report: None,
        }
    }

    /// Appends to `path`, creating it (mode 0640) if needed.
    pub fn file(path: PathBuf) -> anyhow::Result<Self> {
        let file = open_append(&path)?;
        Ok(Self {
            file: Some((path, file)),
            ..Self::stdout()
        })
    }

    /// The buffer to render the next line into; end it with '\n'.
    pub fn line_buffer(&mut self) -> &mut Vec<u8> {
        &mut self.batch
    }

    /// Writes the batch: all of it, or none of it (counted and reported).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let result = match &mut self.file {
            Some((_, file)) => write_whole(file, &self.batch),
            None => {
                let mut out = io::stdout().lock();
                out.write_all(&self.batch).and_then(|()| out.flush())
            }
        };
        // Counted only on failure: a byte-wise count of every batch took a
        // seventh of watch's time under a flood.
        let lines = match result {
            Ok(()) => 0,
            Err(_) => self.batch.iter().filter(|&&b| b == b'\n').count() as u64,
        };
        self.batch.clear();
        match result {
            Ok(()) => Ok(()),
            // `watch | head` ends quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe && self.file.is_none() => Err(e),
            Err(e) => {
                self.unwritten += lines;
                if self
                    .last_report
                    .is_none_or(|at| at.elapsed() >= REPORT_EVERY)
                {
                    let target = self
                        .file
                        .as_ref()
                        .map_or("stdout".to_string(), |(p, _)| p.display().to_string());
                    eprintln!("gpu-trace: cannot write to {target}: {e}; {} events not written so far (still counted)", self.unwritten);
                    self.last_report = Some(Instant::now());
                }
                Ok(())
            }
        }
    }

    /// After logrotate moved the file: write to a new one at the same path.
    /// On failure the old file stays in use and the failure is counted.
    pub fn reopen(&mut self) -> anyhow::Result<()> {
        self.flush()?;
        if let Some((path, file)) = &mut self.file {
            match open_append(path) {
                Ok(new) => *file = new,
                Err(e) => {
                    self.failed_reopens += 1;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub fn unwritten(&self) -> u64 {
        self.unwritten
    }

    pub fn failed_reopens(&self) -> u64 {
        self.failed_reopens
    }
}

/// Appends `batch`, or nothing: a write cut short (a full disk) is taken
/// back, so the file never ends in half a line.
fn write_whole(file: &mut File, batch: &[u8]) -> io::Result<()> {
    let before = file.metadata()?.len();
    file.write_all(batch).inspect_err(|_| {
        let _ = file.set_len(before);
    })
}

/// `--output` names something root should not write to.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}; gpu-trace appends only to a regular file owned by root, never through a symbolic link")]
pub struct UnsafeOutput {
    path: String,
    why: String,
}

/// Appends to `path`, made 0640 if new: never through a symlink (O_NOFOLLOW),
/// never blocking on a FIFO (O_NONBLOCK), and only to a regular file root owns.
fn open_append(path: &Path) -> anyhow::Result<File> {
    let unsafe_output = |why: String| UnsafeOutput {
        path: path.display().to_string(),
        why,
    };
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => unsafe_output("is a symbolic link".into()).into(),
            Some(libc::ENXIO) => unsafe_output("is a FIFO with no reader".into()).into(),
            _ => anyhow::Error::new(e).context(format!("opening {} for appending", path.display())),
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(unsafe_output("is not a regular file".into()).into());
    }
    if meta.uid() != 0 {
        return Err(unsafe_output(format!("is owned by uid {}, not root", meta.uid())).into());
    }
    // A second name could be a hard link someone made to a file of root's
    // (where fs.protected_hardlinks is off).
    if meta.nlink() != 1 {
        return Err(unsafe_output(format!("has {} hard links, not 1", meta.nlink())).into());
    }
    Ok(file)
}
