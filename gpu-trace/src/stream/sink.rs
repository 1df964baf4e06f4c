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
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

const REPORT_EVERY: Duration = Duration::from_secs(60);

/// A batch this large is handed to the writer before the drain ends: under
/// a flood the writing then overlaps the rendering, and the batches in
/// flight stay small (a drain of 4 096 events renders about 6 MB).
const HAND_OVER_BYTES: usize = 1 << 20;

/// Lines are rendered on watch's thread and written on a thread of their
/// own: copying a flood's lines into the page cache took more than half of
/// watch's time, and the ring buffer waited for it.
pub struct Sink {
    /// Complete lines waiting to be handed over.
    batch: Vec<u8>,
    /// To the writer; None once it was told to finish.
    jobs: Option<mpsc::SyncSender<Job>>,
    /// Buffers the writer is done with, to render into again.
    spare: mpsc::Receiver<Vec<u8>>,
    writer: Option<JoinHandle<()>>,
    counts: Arc<Counts>,
}

/// What the writer tells watch's thread.
#[derive(Default)]
struct Counts {
    /// Lines that could not be written.
    unwritten: AtomicU64,
    /// SIGHUPs whose reopen failed (writing went on to the old file).
    failed_reopens: AtomicU64,
    /// stdout's reader went away (`watch | head`).
    pipe_closed: AtomicBool,
}

enum Job {
    Lines(Vec<u8>),
    Reopen(mpsc::Sender<anyhow::Result<()>>),
}

impl Sink {
    pub fn stdout() -> Self {
        Self::spawn(None)
    }

    /// Appends to `path`, creating it (mode 0640) if needed.
    pub fn file(path: PathBuf) -> anyhow::Result<Self> {
        let file = open_append(&path)?;
        Ok(Self::spawn(Some((path, file))))
    }

    fn spawn(file: Option<(PathBuf, File)>) -> Self {
        // One batch queued while one is written: the renderer waits rather
        // than pile up a backlog in memory.
        let (jobs, queue) = mpsc::sync_channel(1);
        let (give_back, spare) = mpsc::channel();
        let counts = Arc::new(Counts::default());
        let mut writer = Writer {
            file,
            counts: Arc::clone(&counts),
            last_report: None,
        };
        let writer = std::thread::Builder::new()
            .name("gpu-trace-sink".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Lines(mut lines) => {
                            writer.write(&lines);
                            lines.clear();
                            let _ = give_back.send(lines);
                        }
                        Job::Reopen(answer) => {
                            let _ = answer.send(writer.reopen());
                        }
                    }
                }
            })
            .expect("starting the output thread");
        Self {
            batch: Vec::new(),
            jobs: Some(jobs),
            spare,
            writer: Some(writer),
            counts,
        }
    }

    /// The buffer to render the next line into; end it with '\n'.
    pub fn line_buffer(&mut self) -> &mut Vec<u8> {
        &mut self.batch
    }

    /// The batch is large enough to hand over now, drain or no drain.
    pub fn batch_is_full(&self) -> bool {
        self.batch.len() >= HAND_OVER_BYTES
    }

    /// Hands the batch to the writer, which writes all of it or none of it
    /// (counted and reported). Fails with BrokenPipe once stdout's reader
    /// has gone.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.counts.pipe_closed.load(Ordering::Relaxed) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if self.batch.is_empty() {
            return Ok(());
        }
        let next = self.spare.try_recv().unwrap_or_default();
        let lines = std::mem::replace(&mut self.batch, next);
        self.send(Job::Lines(lines))
    }

    fn send(&self, job: Job) -> io::Result<()> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| io::Error::other("the output thread has ended"))
    }

    /// After logrotate moved the file: write to a new one at the same path,
    /// after every line handed over before. On failure the old file stays
    /// in use and the failure is counted.
    pub fn reopen(&mut self) -> anyhow::Result<()> {
        match self.flush() {
            // Only stdout's reader goes away, and stdout is never reopened:
            // the next flush ends watch quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
        let (answer, answered) = mpsc::channel();
        self.send(Job::Reopen(answer))?;
        answered
            .recv()
            .map_err(|_| anyhow::anyhow!("the output thread has ended"))?
    }

    /// Writes what is left and waits for it; the counts are final after this.
    pub fn finish(&mut self) {
        let _ = self.flush();
        self.jobs = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }

    pub fn unwritten(&self) -> u64 {
        self.counts.unwritten.load(Ordering::Relaxed)
    }

    pub fn failed_reopens(&self) -> u64 {
        self.counts.failed_reopens.load(Ordering::Relaxed)
    }
}

impl Drop for Sink {
    /// Lines already rendered are written on every way out.
    fn drop(&mut self) {
        self.finish();
    }
}

/// The output thread's side: the file (or stdout) and its failures.
struct Writer {
    file: Option<(PathBuf, File)>,
    counts: Arc<Counts>,
    last_report: Option<Instant>,
}

impl Writer {
    fn write(&mut self, batch: &[u8]) {
        let result = match &mut self.file {
            Some((_, file)) => write_whole(file, batch),
            None => {
                let mut out = io::stdout().lock();
                out.write_all(batch).and_then(|()| out.flush())
            }
        };
        let Err(e) = result else {
            return;
        };
        // `watch | head` ends quietly.
        if e.kind() == io::ErrorKind::BrokenPipe && self.file.is_none() {
            self.counts.pipe_closed.store(true, Ordering::Relaxed);
            return;
        }
        // Counted only on failure: a byte-wise count of every batch took a
        // seventh of watch's time under a flood.
        let lines = batch.iter().filter(|&&b| b == b'\n').count() as u64;
        let unwritten = self.counts.unwritten.fetch_add(lines, Ordering::Relaxed) + lines;
        if self
            .last_report
            .is_none_or(|at| at.elapsed() >= REPORT_EVERY)
        {
            let target = self
                .file
                .as_ref()
                .map_or("stdout".to_string(), |(p, _)| p.display().to_string());
            eprintln!("gpu-trace: cannot write to {target}: {e}; {unwritten} events not written so far (still counted)");
            self.last_report = Some(Instant::now());
        }
    }

    fn reopen(&mut self) -> anyhow::Result<()> {
        if let Some((path, file)) = &mut self.file {
            match open_append(path) {
                Ok(new) => *file = new,
                Err(e) => {
                    self.counts.failed_reopens.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(sink: &mut Sink, from: usize, to: usize) {
        for n in from..to {
            writeln!(sink.line_buffer(), "line {n}").expect("render");
        }
    }

    #[test]
    fn every_line_handed_over_is_written_in_order_by_the_time_finish_returns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("out.jsonl");
        let file = File::create(&path).expect("create");
        let mut sink = Sink::spawn(Some((path.clone(), file)));
        lines(&mut sink, 0, 10);
        sink.flush().expect("hand over");
        // More than one batch's worth, handed over as it fills.
        let mut n = 10;
        while !sink.batch_is_full() {
            lines(&mut sink, n, n + 1000);
            n += 1000;
        }
        sink.flush().expect("hand over");
        lines(&mut sink, n, n + 5); // left for finish
        sink.finish();
        let written = std::fs::read_to_string(&path).expect("read back");
        let expected: String = (0..n + 5).map(|n| format!("line {n}\n")).collect();
        assert!(
            written == expected,
            "{} lines written, {} expected",
            written.lines().count(),
            n + 5
        );
        assert_eq!(sink.unwritten(), 0);
    }

    #[test]
    fn lines_a_write_refuses_are_counted_not_lost_silently() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("read-only.jsonl");
        std::fs::write(&path, "").expect("create");
        // Opened for reading: every write fails (EBADF).
        let file = File::open(&path).expect("open");
        let mut sink = Sink::spawn(Some((path.clone(), file)));
        lines(&mut sink, 0, 3);
        sink.flush().expect("hand over");
        lines(&mut sink, 3, 7);
        sink.finish();
        assert_eq!(sink.unwritten(), 7);
        assert_eq!(std::fs::read_to_string(&path).expect("read back"), "");
    }
}
