//! NumPy `.npz` archives of named arrays (a zip of `.npy` files): reading a
//! user's data and writing and reading a run's saved state. Arrays are
//! C-ordered; the element types are those the runtime holds (f32, f64, i64,
//! i32, i8, u8, bool).

use crate::emit::output::write_atomically;
use crate::error::{Error, Result};
use lms_runtime::{Buffer, HostTensor};
use npyz::{Deserialize, NpyFile, TypeChar, WriterBuilder};
use std::io::{Cursor, Read, Write};
use std::path::Path;

/// Every array of the `.npz` file at `path`, by name (without `.npy`), in
/// archive order.
pub fn read(path: &Path) -> Result<Vec<(String, HostTensor)>> {
    let fail = |message: String| Error::Usage(message).in_file(path);
    let file = std::fs::File::open(path).map_err(|e| Error::from(e).in_file(path))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| fail(format!("not an .npz archive: {e}")))?;
    let mut arrays = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| fail(format!("cannot read entry {i}: {e}")))?;
        let name = entry.name().strip_suffix(".npy").unwrap_or(entry.name()).to_string();
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(|e| fail(format!("array '{name}': {e}")))?;
        let tensor = decode(&bytes).map_err(|e| fail(format!("array '{name}': {e}")))?;
        arrays.push((name, tensor));
    }
    Ok(arrays)
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

/// One `.npy` file's array.
fn decode(bytes: &[u8]) -> std::result::Result<HostTensor, String> {
    let npy = NpyFile::new(bytes).map_err(|e| format!("not a .npy array: {e}"))?;
    if npy.order() != npyz::Order::C && npy.shape().len() > 1 {
        return Err("is stored in Fortran order; save it with numpy.ascontiguousarray".into());
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let dtype = npy.dtype();
    let descr = dtype.descr();
    let kind = match &dtype {
        npyz::DType::Plain(t) => (t.type_char(), t.size_field()),
        _ => return Err(format!("has a structured type {descr}")),
    };
    fn values<T: Deserialize>(npy: NpyFile<&[u8]>) -> std::result::Result<Vec<T>, String> {
        npy.into_vec::<T>().map_err(|e| e.to_string())
    }
    let data = match kind {
        (TypeChar::Float, 4) => Buffer::F32(values(npy)?),
        (TypeChar::Float, 8) => Buffer::F64(values(npy)?),
        (TypeChar::Int, 8) => Buffer::I64(values(npy)?),
        (TypeChar::Int, 4) => Buffer::I32(values(npy)?),
        (TypeChar::Int, 1) => Buffer::I8(values(npy)?),
        (TypeChar::Uint, 1) => Buffer::U8(values(npy)?),
        (TypeChar::Bool, 1) => Buffer::Bool(values(npy)?),
        _ => return Err(format!("has element type {descr}, which lms does not hold")),
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
        assert_eq!(read(&path).unwrap(), arrays);
        std::fs::write(&path, b"not a zip").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("a.npz: not an .npz archive"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
