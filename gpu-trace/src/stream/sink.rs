//! Where watch's lines go: stdout, or a file that logrotate may move away
//! (SIGHUP reopens it). Lines are written whole, a batch per write, so a
//! reader never sees half a line from us; a failing write (a full disk, a
//! file that became unwritable) is reported at most once a minute while
//! the events keep being counted.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

const REPORT_EVERY: Duration = Duration::from_secs(60);

pub struct Sink {
    file: Option<(PathBuf, File)>,
    /// Complete lines waiting for the next flush.
    batch: Vec<u8>,
    /// Lines that could not be written since the last report.
    unwritten: u64,
    last_report: Option<Instant>,
}

impl Sink {
    pub fn stdout() -> Self {
        Self {
            file: None,
            batch: Vec::new(),
            unwritten: 0,
            last_report: None,
        }
    }

    /// Appends to `path`, creating it (mode 0640) if needed.
    pub fn file(path: PathBuf) -> io::Result<Self> {
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
    pub fn reopen(&mut self) -> io::Result<()> {
        self.flush()?;
        if let Some((path, file)) = &mut self.file {
            *file = open_append(path)?;
        }
        Ok(())
    }

    pub fn unwritten(&self) -> u64 {
        self.unwritten
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

fn open_append(path: &PathBuf) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}
