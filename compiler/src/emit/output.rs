//! Writing output files safely. A new or regular file goes to a temporary
//! file created exclusively, with a unique name, in the target's folder (so
//! no planted link is ever followed), renamed over the target only once
//! complete and removed on every failure path. A target that exists and is
//! not a regular file (a device, a FIFO, a socket, or a link to one, such as
//! `/dev/null` or `/dev/stdout`) is opened and written into, as `cc -o
//! /dev/null` does: never renamed over or unlinked. A directory is refused.
//! Before anything is written, a command's outputs are checked to be distinct
//! from each other and from its inputs; only a character device (such as
//! `/dev/null`) may take several outputs, since nothing reads them back.

use crate::error::{Error, Result};
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes `bytes` to `path`: into the file itself when it is a special file
/// (or a link to one), else through a fresh temporary sibling and a rename,
/// so a link at `path` to a regular file is replaced, never followed. Errors
/// name the file and say "cannot write".
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(Error::Write(std::io::Error::other("is a directory")).in_file(path));
        }
        Ok(meta) if !meta.is_file() => return write_into_special(path, bytes),
        _ => {}
    }
    let write = || -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = path.file_name().ok_or_else(|| std::io::Error::other("the path names no file"))?;
        let (mut file, temporary) = create_sibling(dir, name)?;
        let written = file.write_all(bytes).and_then(|()| file.sync_data());
        drop(file);
        let renamed = written.and_then(|()| std::fs::rename(&temporary, path));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        renamed
    };
    write().map_err(|e| Error::Write(e).in_file(path))
}

/// Creates a new file `.NAME.<pid>.<time>.<n>.tmp` in `dir`, exclusively
/// (`O_CREAT|O_EXCL`: never an existing file, never through a link), read
/// and write for all less the umask, trying the next name while one exists.
fn create_sibling(dir: &Path, name: &OsStr) -> std::io::Result<(File, PathBuf)> {
    static CREATED: AtomicU64 = AtomicU64::new(0);
    let time = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for _ in 0..1000 {
        let mut file_name = OsString::from(".");
        file_name.push(name);
        file_name.push(format!(".{}.{time:x}.{}.tmp", std::process::id(), CREATED.fetch_add(1, Ordering::Relaxed)));
        let candidate = dir.join(file_name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o666);
        match options.open(&candidate) {
            Ok(file) => return Ok((file, candidate)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(ErrorKind::AlreadyExists, "no free name for a temporary file"))
}

/// Writes `bytes` into an existing special file (a device, a FIFO, or a
/// link to one) opened for writing without creating, truncating or
/// replacing it; opening a FIFO waits for its reader, as any writer does.
fn write_into_special(path: &Path, bytes: &[u8]) -> Result<()> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.write_all(bytes)?;
        file.flush()
    };
    write().map_err(|e| Error::Write(e).in_file(path))
}

/// Refuses outputs that name an input or each other. `inputs` and `outputs`
/// are (flag or role, path) pairs; paths are compared after resolving links
/// in their folder, so `./m.onnx` and `m.onnx` are the same file. Several
/// outputs into one character device (`/dev/null`, a terminal) are allowed;
/// into one FIFO they are refused, as the reader would get them run together.
pub fn check_distinct(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    let inputs: Vec<(&str, PathBuf)> = inputs.iter().map(|&(role, p)| (role, resolved(p))).collect();
    let mut seen: Vec<(&str, PathBuf)> = Vec::with_capacity(outputs.len());
    for &(role, path) in outputs {
        let target = resolved(path);
        if let Some((input, _)) = inputs.iter().find(|(_, p)| *p == target) {
            return Err(Error::Usage(format!(
                "{role} {} is the {input}: lms never overwrites an input",
                path.display()
            )));
        }
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == target).filter(|_| !is_char_device(path)) {
            return Err(Error::Usage(format!("{role} {} is also the file of {other}", path.display())));
        }
        seen.push((role, target));
    }
    Ok(())
}

/// Whether `path` is, or links to, a character device.
fn is_char_device(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// The path with its folder resolved (links followed) and, when the file
/// itself exists, the file resolved too; else the path as given.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match (dir.canonicalize(), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lms-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_through_a_unique_temporary_and_leaves_nothing_on_failure() {
        let dir = scratch().join("write");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.txt");
        write_atomically(&out, b"one").unwrap();
        write_atomically(&out, b"two").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        // A directory in the way is refused before anything is written.
        let blocked = dir.join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        let err = write_atomically(&blocked, b"x").unwrap_err().to_string();
        assert!(err.contains("blocked: cannot write"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "only out.txt and blocked/: {left:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_target_is_replaced_not_followed() {
        let dir = scratch().join("link");
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let out = dir.join("out.lms");
        let _ = std::fs::remove_file(&out);
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_atomically(&out, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
    }

    /// A FIFO made in `dir`, drained by a thread that returns what it read.
    #[cfg(unix)]
    fn drained_fifo(dir: &Path, name: &str) -> (PathBuf, std::thread::JoinHandle<Vec<u8>>) {
        let fifo = dir.join(name);
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let reader = fifo.clone();
        let drain = std::thread::spawn(move || std::fs::read(reader).unwrap());
        (fifo, drain)
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_a_link_to_one_receives_the_bytes_and_stays_what_it_is() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch().join("special");
        std::fs::create_dir_all(&dir).unwrap();
        let (fifo, drain) = drained_fifo(&dir, "fifo");
        write_atomically(&fifo, b"into the fifo").unwrap();
        assert_eq!(drain.join().unwrap(), b"into the fifo");
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        let (fifo, drain) = drained_fifo(&dir, "fifo2");
        let link = dir.join("stdout");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        write_atomically(&link, b"through the link").unwrap();
        assert_eq!(drain.join().unwrap(), b"through the link");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 3, "no temporary left: {left:?}");
    }

    #[test]
    fn a_directory_target_is_refused() {
        let dir = scratch().join("dir-target");
        std::fs::create_dir_all(dir.join("out.lms")).unwrap();
        let err = write_atomically(&dir.join("out.lms"), b"x").unwrap_err().to_string();
        assert!(err.ends_with("out.lms: cannot write: is a directory"), "{err}");
        assert!(dir.join("out.lms").is_dir());
    }

    #[test]
    fn outputs_naming_an_input_or_each_other_are_refused() {
        let dir = scratch();
        let model = dir.join("m.onnx");
        std::fs::write(&model, b"m").unwrap();
        let same = dir.join(".").join("m.onnx");
        let err = check_distinct(&[("model", &model)], &[("-o", &same)]).unwrap_err().to_string();
        assert!(err.ends_with("is the model: lms never overwrites an input"), "{err}");
        let x = dir.join("x");
        let err = check_distinct(&[("model", &model)], &[("-o", &x), ("--text", &x)]).unwrap_err().to_string();
        assert!(err.starts_with("--text ") && err.ends_with("is also the file of -o"), "{err}");
        check_distinct(&[("model", &model)], &[("-o", &x), ("--text", &dir.join("y"))]).unwrap();
    }
}
