//! The `.npz` target: what `lms run --data FILE` and `lms run --resume FILE` do with a
//! hostile archive, in-process, on the MLP fixture's training graph (batch 2) under a
//! 64 MiB device and host budget. Inputs are whole `.npz` files (a finding's file is the
//! archive to pass to `lms run`); mutation works on their structure: member names, the
//! `.npy` header (element type, order, shape, version), the data, the compression and the
//! sizes the zip headers declare (a declared size far above the data is a zip bomb that
//! costs nothing to make).

use super::mutate::Rng;
use super::runner::Target;
use super::surface;
use crate::fixture;
use lms_compiler::budget::Limits;
use lms_compiler::commands::run::{self, DeviceKind, RunPlan};
use lms_compiler::emit::serialize;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::npz;
use lms_compiler::train::{self, TrainOptions};
use lms_proto::contract::{NodeKind, INPUT_OP};
use lms_proto::Message;
use lms_runtime::{Buffer, HostTensor, Program};
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// Device and host budget of every run: far above what the MLP at batch 2 takes.
const BUDGET: u64 = 64 << 20;

/// Samples in the data seed (two batches).
const SEED_SAMPLES: usize = 4;

/// One member of an archive.
#[derive(Clone)]
struct Member {
    /// The member's file name in the zip.
    name: String,
    /// The member's bytes: an `.npy` file, or anything once mutated.
    npy: Npy,
    /// Deflated instead of stored.
    deflate: bool,
    /// A size to declare in the zip headers instead of the real one.
    declared: Option<u32>,
}

/// An `.npy` file by its parts, so mutations keep the rest valid.
#[derive(Clone)]
struct Npy {
    /// Format version (major).
    version: u8,
    /// The header's `descr` value, as written (quoted for a plain type).
    descr: String,
    /// The header's `fortran_order` value.
    fortran: String,
    /// The header's `shape` entries, as written.
    shape: Vec<String>,
    /// The array's bytes.
    data: Vec<u8>,
    /// A header text replacing the one the parts make.
    raw_header: Option<Vec<u8>>,
}

impl Npy {
    /// Parses the `.npy` files lms writes (the seeds).
    fn parse(bytes: &[u8]) -> Npy {
        let length = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = String::from_utf8_lossy(&bytes[10..10 + length]).into_owned();
        let field = |key: &str, end: char| {
            let at = header.find(key).unwrap_or_else(|| panic!("{key} in {header}")) + key.len();
            header[at..at + header[at..].find(end).expect("field end")].trim().to_string()
        };
        let shape = field("'shape': (", ')');
        Npy {
            version: bytes[6],
            descr: field("'descr':", ','),
            fortran: field("'fortran_order':", ','),
            shape: shape.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_string).collect(),
            data: bytes[10 + length..].to_vec(),
            raw_header: None,
        }
    }

    /// The file: magic, version, header length (2 bytes in version 1, 4 after) and header.
    fn bytes(&self) -> Vec<u8> {
        let header = self.raw_header.clone().unwrap_or_else(|| {
            let comma = if self.shape.len() == 1 { "," } else { "" };
            format!(
                "{{'descr': {}, 'fortran_order': {}, 'shape': ({}{comma}), }}\n",
                self.descr,
                self.fortran,
                self.shape.join(", ")
            )
            .into_bytes()
        });
        let mut out = b"\x93NUMPY".to_vec();
        out.extend([self.version, 0]);
        if self.version == 1 {
            out.extend((header.len() as u16).to_le_bytes());
        } else {
            out.extend((header.len() as u32).to_le_bytes());
        }
        out.extend(header);
        out.extend(&self.data);
        out
    }
}

/// Reads an archive's members (the seeds, which are well formed).
fn members(bytes: &[u8]) -> Vec<Member> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a seed archive");
    (0..archive.len())
        .map(|i| {
            let mut entry = archive.by_index(i).expect("a seed member");
            let mut npy = Vec::new();
            entry.read_to_end(&mut npy).expect("a seed member's bytes");
            Member { name: entry.name().to_string(), npy: Npy::parse(&npy), deflate: false, declared: None }
        })
        .collect()
}

/// Writes an archive, then overwrites the uncompressed sizes its headers declare where a
/// member says so (local header and central directory).
fn archive(members: &[Member]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for m in members {
        let method = if m.deflate { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        // A duplicate or odd name is refused by the writer: the member is left out.
        if zip.start_file(m.name.as_str(), options).is_ok() {
            zip.write_all(&m.npy.bytes()).expect("writing to memory");
        }
    }
    let mut bytes = zip.finish().expect("writing to memory").into_inner();
    let declared: Vec<Option<u32>> = members.iter().map(|m| m.declared).collect();
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    // The end-of-central-directory record (22 bytes, no comment) says where the directory is.
    let (mut local, mut central) = (0, u32_at(&bytes, bytes.len() - 22 + 16));
    for size in declared {
        if local + 30 > bytes.len() || central + 46 > bytes.len() || u32_at(&bytes, local) != 0x0403_4b50 {
            break;
        }
        let next_local =
            local + 30 + u16_at(&bytes, local + 26) + u16_at(&bytes, local + 28) + u32_at(&bytes, local + 18);
        let next_central =
            central + 46 + u16_at(&bytes, central + 28) + u16_at(&bytes, central + 30) + u16_at(&bytes, central + 32);
        if let Some(size) = size {
            bytes[local + 22..local + 26].copy_from_slice(&size.to_le_bytes());
            bytes[central + 24..central + 28].copy_from_slice(&size.to_le_bytes());
        }
        (local, central) = (next_local, next_central);
    }
    bytes
}

/// Element types a header may declare: those lms holds, others, byte orders, structured
/// and malformed ones.
const DESCRS: &[&str] = &[
    "'<f4'",
    "'<f8'",
    "'<i8'",
    "'<i4'",
    "'|i1'",
    "'|u1'",
    "'|b1'",
    "'>f4'",
    "'>i8'",
    "'<f2'",
    "'<u8'",
    "'<U3'",
    "'|O'",
    "'<c8'",
    "'<V8'",
    "[('a', '<f4')]",
    "'x'",
    "''",
    "3",
];

/// Dimensions a shape may get.
const DIMS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "10",
    "784",
    "1048576",
    "2147483648",
    "4294967296",
    "17592186044416",
    "4611686018427387904",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "x",
];

/// Member names: the graph's (from the seeds), the step count, and hostile ones.
const NAMES: &[&str] =
    &["lms.steps.npy", "labels.npy", "x.npy", "", ".npy", "../x.npy", "a/b.npy", "input", "x.npy.npy"];

/// Sizes to declare in the zip headers (the real one is also moved by one either way).
const DECLARED: &[u32] = &[0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, 0xffff_ffff];

/// Mutates one archive: 1 to 3 edits of its members' headers, data, names, compression
/// or declared sizes, or members taken from another seed.
fn mutate_npz(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut members = members(seed);
    for _ in 0..1 + rng.below(3) {
        if members.is_empty() {
            members = self::members(&seeds[rng.below(seeds.len())]);
        }
        let at = rng.below(members.len());
        let m = &mut members[at];
        match rng.below(10) {
            0 => {
                let dim = DIMS[rng.below(DIMS.len())].to_string();
                match rng.below(4) {
                    0 => m.npy.shape.push(dim),
                    1 if !m.npy.shape.is_empty() => drop(m.npy.shape.remove(rng.below(m.npy.shape.len()))),
                    2 => m.npy.shape.clear(),
                    _ if !m.npy.shape.is_empty() => {
                        let i = rng.below(m.npy.shape.len());
                        m.npy.shape[i] = dim;
                    }
                    _ => m.npy.shape.push(dim),
                }
            }
            1 => m.npy.descr = DESCRS[rng.below(DESCRS.len())].to_string(),
            2 => m.npy.fortran = ["True", "False", "1", "None"][rng.below(4)].to_string(),
            3 => {
                let len = m.npy.data.len();
                match rng.below(6) {
                    0 => m.npy.data.truncate(rng.below(len + 1)),
                    1 => m.npy.data.extend((0..1 + rng.below(64)).map(|_| rng.below(256) as u8)),
                    2 if len > 0 => m.npy.data[rng.below(len)] ^= 1 << rng.below(8),
                    3 if len >= 4 => {
                        let i = rng.below(len / 4) * 4;
                        let special = [f32::NAN, f32::INFINITY, -0.0, 1e38, f32::MIN_POSITIVE][rng.below(5)];
                        m.npy.data[i..i + 4].copy_from_slice(&special.to_le_bytes());
                    }
                    // A member that inflates far beyond its compressed size.
                    4 => (m.npy.data, m.deflate) = (vec![0; [1 << 20, 16 << 20][rng.below(2)]], true),
                    _ => m.npy.data.clear(),
                }
            }
            4 => m.name = NAMES[rng.below(NAMES.len())].to_string(),
            5 => m.deflate = !m.deflate,
            6 => {
                let real = m.npy.bytes().len() as u32;
                let lies = [real.wrapping_sub(1), real.wrapping_add(1), DECLARED[rng.below(DECLARED.len())]];
                m.declared = Some(lies[rng.below(3)]);
            }
            7 => {
                let mut header = m.npy.bytes()[10..].to_vec();
                header.truncate(rng.below(header.len().min(128) + 1));
                m.npy.raw_header = Some(header);
            }
            8 => m.npy.version = [1, 2, 3, 0, 9][rng.below(5)],
            _ => match rng.below(3) {
                0 => drop(members.remove(at)),
                1 => members.push(members[at].clone()),
                _ => {
                    let other = self::members(&seeds[rng.below(seeds.len())]);
                    members.push(other[rng.below(other.len())].clone());
                }
            },
        }
    }
    archive(&members)
}

/// The MLP's training graph at batch 2 written to `dir/m.lms`, and its program.
fn training_graph(dir: &Path) -> (PathBuf, Program) {
    let model = frontend::load(&fixture("models/mlp.onnx"), &FrontendOptions { batch: Some(2), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let graph = train::build(&model.graph, &TrainOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let bytes = serialize::to_proto(&graph, &[]).unwrap_or_else(|e| panic!("{e}")).encode_to_vec();
    let path = dir.join("m.lms");
    std::fs::write(&path, &bytes).expect("write the graph");
    let program = Program::decode(&bytes, "m.lms").unwrap_or_else(|e| panic!("{e}"));
    (path, program)
}

/// Data for every input of `program`: [`SEED_SAMPLES`] samples of zeros (labels 0).
fn data_seed(program: &Program) -> Vec<(String, HostTensor)> {
    (0..program.node_count())
        .filter(|&n| program.kind(n) == NodeKind::Parameter && program.node(n).op == INPUT_OP)
        .map(|n| {
            let ty = program.tensor_type(program.node_outputs(n)[0]);
            let shape: Vec<usize> = std::iter::once(SEED_SAMPLES).chain(ty.shape[1..].iter().copied()).collect();
            let count = shape.iter().product();
            let data = match ty.dtype {
                lms_proto::lms::DType::DtypeI64 => Buffer::I64(vec![0; count]),
                _ => Buffer::F32(vec![0.5; count]),
            };
            (program.node(n).name.clone(), HostTensor::new(shape, data).expect("a seed array"))
        })
        .collect()
}

/// One run of `graph` under [`BUDGET`] as `plan` says; whether it succeeded.
fn run_once(graph: &Path, plan: &RunPlan) -> bool {
    let limits = Limits { device: Some(BUDGET), host: Some(BUDGET) };
    run::run(graph, DeviceKind::Cpu, plan, limits, 1, |_, _, _| Ok(ControlFlow::Continue(()))).is_ok()
}

/// The `.npz` target: each input is tried as `--data` (one epoch) and as `--resume` (one
/// step); accepted when either run succeeds. Seeds: a data file of two batches and the
/// state a one-step run saves.
pub fn npz_inputs() -> Target {
    let dir = surface::scratch("npz");
    let (graph, program) = training_graph(&dir);
    let data = dir.join("data.npz");
    npz::write(&data, &data_seed(&program)).unwrap_or_else(|e| panic!("{e}"));
    let state = dir.join("state.npz");
    let save = RunPlan { steps: 1, save_state: Some(state.clone()), ..RunPlan::default() };
    assert!(run_once(&graph, &save), "a one-step run saves the state seed");
    let seeds = [&data, &state].iter().map(|p| std::fs::read(p).expect("a seed archive")).collect();
    let input = dir.join("input.npz");
    let run = move |bytes: &[u8]| {
        std::fs::write(&input, bytes).expect("write the input");
        let trained = run_once(&graph, &RunPlan { epochs: 1, data: Some(input.clone()), ..RunPlan::default() });
        let resumed = run_once(&graph, &RunPlan { steps: 1, resume: Some(input.clone()), ..RunPlan::default() });
        trained || resumed
    };
    Target { name: "npz", seeds, mutate: mutate_npz, run: Box::new(run) }
}
