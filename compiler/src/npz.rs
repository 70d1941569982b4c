//! NumPy `.npz` archives of named arrays (a zip of `.npy` files): reading a
//! user's data and writing and reading a run's saved state. Arrays are
//! C-ordered; the element types are those the runtime holds (f32, f64, i64,
//! i32, i8, u8, bool).

use crate::emit::output::write_atomically;
use crate::error::{Error, Result};
use crate::units::format_bytes;
use lms_proto::input::InputError;
use lms_proto::lms::DType;
use lms_runtime::tensor::{dtype_name, dtype_size, numel};
use lms_runtime::{Buffer, HostTensor};
use npyz::{Deserialize, NpyFile, NpyHeader, TypeChar, WriterBuilder};
use std::io::{BufReader, Cursor, Read, Write};
use std::path::Path;

/// Largest `.npy` header read (numpy writes a few hundred bytes; its own
/// reader refuses more than 10,000 unless told otherwise).
const MAX_NPY_HEADER_BYTES: u64 = 64 << 10;

/// Bytes an archive may hold besides its arrays' values (zip and `.npy`
/// headers, names): 16 MiB, tens of thousands of arrays.
pub const ARCHIVE_OVERHEAD_BYTES: u64 = 16 << 20;

/// Every array of the `.npz` file at `path`, by name (without `.npy`), in
/// archive order. Nothing is allocated from a size the file states before it
/// is checked: the file is a regular file ([`lms_proto::input::open_regular`])
/// of at most `max_bytes` plus [`ARCHIVE_OVERHEAD_BYTES`]; each array's
/// `.npy` header is read first and given to `check` (name, element type,
/// shape); its values are read only when it passes, when their size fills
/// exactly what the zip member declares, and while all arrays' values stay
/// within `max_bytes`. At most the declared bytes are inflated.
pub fn read(
    path: &Path,
    max_bytes: u64,
    mut check: impl FnMut(&str, DType, &[usize]) -> std::result::Result<(), String>,
) -> Result<Vec<(String, HostTensor)>> {
    let fail = |message: String| Error::Usage(message).in_file(path);
    let (file, size) = lms_proto::input::open_regular(path).map_err(|e| Error::from(e).in_file(path))?;
    let max_file = max_bytes.saturating_add(ARCHIVE_OVERHEAD_BYTES);
    if size > max_file {
        return Err(Error::from(InputError::TooLarge { size, max: max_file }).in_file(path));
    }
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| fail(format!("not an .npz archive: {e}")))?;
    let mut arrays: Vec<(String, HostTensor)> = Vec::new();
    let mut left = max_bytes;
    for i in 0..archive.len() {
        let entry = archive.by_index(i).map_err(|e| fail(format!("cannot read entry {i}: {e}")))?;
        let name = entry.name().strip_suffix(".npy").unwrap_or(entry.name()).to_string();
        let in_array = |e: String| fail(format!("array '{name}' {e}"));
        if arrays.iter().any(|(n, _)| *n == name) {
            return Err(in_array("appears twice".into()));
        }
        let declared = entry.size();
        let mut member = BufReader::new(entry.take(declared));
        let (npy, header_bytes) = read_header(&mut member).map_err(in_array)?;
        let (dtype, shape) = array_type(&npy).map_err(in_array)?;
        check(&name, dtype, &shape).map_err(in_array)?;
        let values = shape
            .iter()
            .try_fold(dtype_size(dtype).unwrap_or(1) as u64, |n, &d| n.checked_mul(d as u64))
            .filter(|&n| header_bytes.checked_add(n) == Some(declared))
            .ok_or_else(|| {
                in_array(format!("of shape {shape:?} does not fill the {declared} bytes its zip member declares"))
            })?;
        if values > left {
            return Err(in_array(format!(
                "takes {}, over what is left of the maximum of {} for this archive",
                format_bytes(values),
                format_bytes(max_bytes)
            )));
        }
        left -= values;
        let tensor = decode(NpyFile::with_header(npy, member), dtype, shape).map_err(in_array)?;
        arrays.push((name, tensor));
    }
    Ok(arrays)
}

/// Reads the `.npy` header at the start of `member`, refusing one longer
/// than [`MAX_NPY_HEADER_BYTES`] before reading it; with the header's bytes
/// (magic and lengths included).
fn read_header(member: &mut impl Read) -> std::result::Result<(NpyHeader, u64), String> {
    let bad = |e: std::io::Error| format!("is not a .npy array: {e}");
    let mut start = [0u8; 10];
    member.read_exact(&mut start).map_err(bad)?;
    if &start[..6] != b"\x93NUMPY" {
        return Err("is not a .npy array: no NUMPY magic".into());
    }
    let mut prefix = start.to_vec();
    let length = match start[6] {
        1 => u64::from(u16::from_le_bytes([start[8], start[9]])),
        2 | 3 => {
            let mut high = [0u8; 2];
            member.read_exact(&mut high).map_err(bad)?;
            prefix.extend_from_slice(&high);
            u64::from(u32::from_le_bytes([start[8], start[9], high[0], high[1]]))
        }
        v => return Err(format!("is not a .npy array: format version {v}")),
    };
    if length > MAX_NPY_HEADER_BYTES {
        return Err(format!("has a .npy header of {length} bytes, over the maximum of {MAX_NPY_HEADER_BYTES}"));
    }
    let header_bytes = prefix.len() as u64 + length;
    let header = NpyHeader::from_reader(Cursor::new(prefix).chain(member.take(length))).map_err(bad)?;
    Ok((header, header_bytes))
}

/// The element type and shape of a `.npy` header, refusing types lms does not
/// hold and Fortran order.
fn array_type(npy: &NpyHeader) -> std::result::Result<(DType, Vec<usize>), String> {
    if npy.order() != npyz::Order::C && npy.shape().len() > 1 {
        return Err("is stored in Fortran order; save it with numpy.ascontiguousarray".into());
    }
    let shape = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| format!("has shape {:?}, too large", npy.shape()))?;
    let dtype = npy.dtype();
    let kind = match &dtype {
        npyz::DType::Plain(t) => (t.type_char(), t.size_field()),
        _ => return Err(format!("has a structured type {}", dtype.descr())),
    };
    let dtype = match kind {
        (TypeChar::Float, 4) => DType::DtypeF32,
        (TypeChar::Float, 8) => DType::DtypeF64,
        (TypeChar::Int, 8) => DType::DtypeI64,
        (TypeChar::Int, 4) => DType::DtypeI32,
        (TypeChar::Int, 1) => DType::DtypeI8,
        (TypeChar::Uint, 1) => DType::DtypeU8,
        (TypeChar::Bool, 1) => DType::DtypeBool,
        _ => return Err(format!("has element type {}, which lms does not hold", dtype.descr())),
    };
    Ok((dtype, shape))
}

/// Writes `arrays` to `path` as an `.npz` file (through a temporary file and
/// a rename), in the given order.
pub fn write(path: &Path, arrays: &[(String, HostTensor)]) -> Result<()> {
    let fail = |message: String| Error::Usage(message).in_file(path);
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, tensor) in arrays {
        let npy = encode(tensor).map_err(|e| fail(format!("array '{name}': {e}")))?;
        zip.start_file(format!("{name}.npy"), options).map_err(|e| fail(format!("array '{name}': {e}")))?;
        zip.write_all(&npy).map_err(|e| fail(format!("array '{name}': {e}")))?;
    }
    let bytes = zip.finish().map_err(|e| fail(e.to_string()))?.into_inner();
    write_atomically(path, &bytes)
}

/// The values of an array of `dtype` and `shape` whose header is read, into
/// storage reserved (fallibly) for exactly its elements.
fn decode(npy: NpyFile<impl Read>, dtype: DType, shape: Vec<usize>) -> std::result::Result<HostTensor, String> {
    let count = numel(&shape);
    fn values<T: Deserialize>(npy: NpyFile<impl Read>, count: usize) -> std::result::Result<Vec<T>, String> {
        let mut out = Vec::new();
        out.try_reserve_exact(count).map_err(|_| {
            format!("cannot allocate {} for its values", format_bytes((count * std::mem::size_of::<T>()) as u64))
        })?;
        for value in npy.data::<T>().map_err(|e| e.to_string())? {
            out.push(value.map_err(|e| e.to_string())?);
        }
        Ok(out)
    }
    let data = match dtype {
        DType::DtypeF32 => Buffer::F32(values(npy, count)?),
        DType::DtypeF64 => Buffer::F64(values(npy, count)?),
        DType::DtypeI64 => Buffer::I64(values(npy, count)?),
        DType::DtypeI32 => Buffer::I32(values(npy, count)?),
        DType::DtypeI8 => Buffer::I8(values(npy, count)?),
        DType::DtypeU8 => Buffer::U8(values(npy, count)?),
        DType::DtypeBool => Buffer::Bool(values(npy, count)?),
        other => return Err(format!("has element type {}, which lms does not hold", dtype_name(other))),
    };
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// A tensor as a `.npy` file.
fn encode(t: &HostTensor) -> std::result::Result<Vec<u8>, String> {
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let mut out = Cursor::new(Vec::new());
    fn put<T: npyz::AutoSerialize + Copy>(
        out: &mut Cursor<Vec<u8>>,
        shape: &[u64],
        values: &[T],
    ) -> std::io::Result<()> {
        let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(out).begin_nd()?;
        w.extend(values.iter().copied())?;
        w.finish()
    }
    let written = match &t.data {
        Buffer::F32(v) => put(&mut out, &shape, v),
        Buffer::F64(v) => put(&mut out, &shape, v),
        Buffer::I64(v) => put(&mut out, &shape, v),
        Buffer::I32(v) => put(&mut out, &shape, v),
        Buffer::I8(v) => put(&mut out, &shape, v),
        Buffer::U8(v) => put(&mut out, &shape, v),
        Buffer::Bool(v) => put(&mut out, &shape, v),
    };
    written.map_err(|e| e.to_string())?;
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip() {
        let arrays = vec![
            ("w".to_string(), HostTensor::new(vec![2, 3], Buffer::F32(vec![1.0, -2.0, 3.5, 0.0, 1e-9, 7.0])).unwrap()),
            ("labels".to_string(), HostTensor::new(vec![3], Buffer::I64(vec![0, 9, 4])).unwrap()),
            ("step".to_string(), HostTensor::new(vec![], Buffer::I64(vec![12])).unwrap()),
            ("mask".to_string(), HostTensor::new(vec![2], Buffer::Bool(vec![true, false])).unwrap()),
        ];
        let dir = std::env::temp_dir().join(format!("lms-npz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npz");
        write(&path, &arrays).unwrap();
        let any = |_: &str, _: DType, _: &[usize]| Ok(());
        assert_eq!(read(&path, 1 << 20, any).unwrap(), arrays);
        std::fs::write(&path, b"not a zip").unwrap();
        let err = read(&path, 1 << 20, any).unwrap_err().to_string();
        assert!(err.contains("a.npz: not an .npz archive"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn headers_are_checked_before_values_are_read() {
        let dir = std::env::temp_dir().join(format!("lms-npz-checked-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npz");
        let w = HostTensor::new(vec![2, 3], Buffer::F32(vec![0.0; 6])).unwrap();
        write(&path, &[("w".to_string(), w.clone()), ("v".to_string(), w)]).unwrap();
        let mut seen = Vec::new();
        let refuse_v = |name: &str, dtype: DType, shape: &[usize]| {
            seen.push((name.to_string(), dtype, shape.to_vec()));
            if name == "v" {
                return Err("is not wanted".to_string());
            }
            Ok(())
        };
        let err = read(&path, 1 << 20, refuse_v).unwrap_err().to_string();
        assert!(err.ends_with("a.npz: array 'v' is not wanted"), "{err}");
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1], ("v".to_string(), DType::DtypeF32, vec![2, 3]));
        // Two arrays of 24 bytes each: the second is over a maximum of 40.
        let err = read(&path, 40, |_, _, _| Ok(())).unwrap_err().to_string();
        assert!(err.contains("array 'v' takes 24 B, over what is left of the maximum of 40 B"), "{err}");
        // A file larger than the maximum and the archive's overhead is not opened as an archive.
        let big = dir.join("big.npz");
        std::fs::File::create(&big).unwrap().set_len(ARCHIVE_OVERHEAD_BYTES + 2).unwrap();
        let err = read(&big, 1, |_, _, _| Ok(())).unwrap_err().to_string();
        assert!(err.contains("over the maximum of"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
