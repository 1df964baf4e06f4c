//! watch's logs as `summary` reads them: plain files, logrotate's gzip'd
//! ones (by their magic bytes, whatever the name), or stdin.

use std::{
    fs::File,
    io::{self, BufRead, BufReader, Read},
    path::Path,
};

use anyhow::Context;
use flate2::read::MultiGzDecoder;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The lines of `path` ("-" for stdin), decompressed where gzip'd.
pub fn open_log(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    let mut source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).with_context(|| format!("opening {}", path.display()))?)
    };
    // Two bytes, however the pipe hands them over, then the rest after them.
    let mut head = Vec::with_capacity(GZIP_MAGIC.len());
    (&mut source)
        .take(GZIP_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    let gzip = head == GZIP_MAGIC;
    let whole = io::Cursor::new(head).chain(source);
    Ok(if gzip {
        Box::new(BufReader::new(MultiGzDecoder::new(whole)))
    } else {
        Box::new(BufReader::new(whole))
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::{write::GzEncoder, Compression};

    use super::*;

    #[test]
    fn gzip_is_known_by_its_content() {
        let dir = tempfile::tempdir().expect("temp dir");
        let plain = dir.path().join("denied.jsonl");
        std::fs::write(&plain, "a\nb\n").expect("write");
        let packed = dir.path().join("denied.jsonl.1");
        let mut gz = GzEncoder::new(File::create(&packed).expect("create"), Compression::fast());
        gz.write_all(b"c\nd\n").expect("compress");
        gz.finish().expect("finish");
        for (path, want) in [(plain, ["a", "b"]), (packed, ["c", "d"])] {
            let lines: Vec<String> = open_log(&path)
                .expect("open")
                .lines()
                .map(|l| l.expect("line"))
                .collect();
            assert_eq!(lines, want);
        }
        assert!(open_log(&dir.path().join("missing")).is_err());
    }
}
