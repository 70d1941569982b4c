//! Reading input files within bounds: only regular files (never a device,
//! a FIFO or a directory), at most the size the file's metadata states and a
//! maximum, so a hostile path can neither block nor exhaust memory.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Largest protobuf file lms reads (an ONNX model or a `.lms` graph): 2 GiB,
/// protobuf's own limit for one message.
pub const MAX_PROTO_FILE_BYTES: u64 = 2 << 30;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The operating system refused or failed the read.
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// The path names a directory.
    #[error("is a directory, not a file")]
    IsDirectory,
    /// The path names a device, a FIFO or a socket.
    #[error("is not a regular file")]
    NotRegular,
    /// The file is larger than the reader's maximum.
    #[error("is {size} bytes, over the maximum of {max} bytes")]
    TooLarge {
        /// The file's size.
        size: u64,
        /// The reader's maximum.
        max: u64,
    },
    /// The file ends before the range asked for.
    #[error("holds {size} bytes, shorter than offset {offset} + length {length}")]
    Short {
        /// The file's size.
        size: u64,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        length: u64,
    },
}

/// Opens `path` for reading when it is a regular file (after following
/// links), with its size. Opening never blocks: a FIFO is opened without
/// waiting for a writer and then refused.
pub fn open_regular(path: &Path) -> Result<(File, u64), InputError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(InputError::IsDirectory);
    }
    if !meta.is_file() {
        return Err(InputError::NotRegular);
    }
    Ok((file, meta.len()))
}

/// The whole of regular file `path`, refusing one over `max` bytes.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, InputError> {
    let (file, size) = open_regular(path)?;
    if size > max {
        return Err(InputError::TooLarge { size, max });
    }
    read_at(file, size, 0, size)
}

/// `length` bytes at `offset` of regular file `path`, refusing a range the
/// file's size does not hold.
pub fn read_range(path: &Path, offset: u64, length: u64) -> Result<Vec<u8>, InputError> {
    let (file, size) = open_regular(path)?;
    read_at(file, size, offset, length)
}

/// Reads `length` bytes at `offset` of an open file of `size` bytes; a file
/// that shrank meanwhile is reported short, one that grew is read only up to
/// the range.
fn read_at(mut file: File, size: u64, offset: u64, length: u64) -> Result<Vec<u8>, InputError> {
    let short = || InputError::Short { size, offset, length };
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(short());
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity(usize::try_from(length).map_err(|_| short())?);
    file.take(length).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != length {
        return Err(short());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lms-proto-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn reads_whole_files_and_ranges_within_bounds() {
        let path = scratch("ten", b"0123456789");
        assert_eq!(read_regular(&path, 10).unwrap(), b"0123456789");
        assert!(matches!(read_regular(&path, 9), Err(InputError::TooLarge { size: 10, max: 9 })));
        assert_eq!(read_range(&path, 2, 3).unwrap(), b"234");
        assert!(matches!(read_range(&path, 8, 3), Err(InputError::Short { size: 10, .. })));
        assert!(matches!(read_range(&path, u64::MAX, 3), Err(InputError::Short { .. })));
    }

    #[cfg(unix)]
    #[test]
    fn refuses_devices_and_directories_without_reading() {
        assert!(matches!(read_regular(Path::new("/dev/zero"), u64::MAX), Err(InputError::NotRegular)));
        assert!(matches!(read_regular(&std::env::temp_dir(), u64::MAX), Err(InputError::IsDirectory)));
    }
}
