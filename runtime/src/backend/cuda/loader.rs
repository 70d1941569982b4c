//! Where the CUDA libraries are found, with no set-up: the backend opens libcuda, NVRTC,
//! cuBLAS and cuDNN itself, by absolute path where needed, before cudarc asks the
//! dynamic loader for them by name (the loader then returns the library already loaded).
//!
//! Places searched, in order: the folders of `LMS_CUDA_LIB_DIR` (a `:`-separated list;
//! each folder and the `nvidia/*/lib` folders under it), the dynamic loader's default,
//! the CUDA toolkit folders, and the `nvidia/*/lib` folders of the Python environments in
//! sight (the active virtualenv or conda environment, then `python3`'s site-packages),
//! where pip installs NVIDIA's wheels (PyTorch's, for one). CUDA 13 sonames are tried
//! before CUDA 12's. A library loaded by path first gets the companions it opens by name
//! (NVRTC's builtins, cuBLASLt, cuDNN's sub-libraries) from its own folder, loaded
//! globally. When a library cannot be found, the error lists every library and every
//! place tried.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The environment variable holding folders searched first.
pub const LIB_DIR_VAR: &str = "LMS_CUDA_LIB_DIR";

/// The environment variable that selects the emulated device (value `1`).
pub const EMULATOR_VAR: &str = "LMS_CUDA_EMULATOR";

/// Test only, on the emulated device: names a file to which the emulated driver appends one
/// line `ENTRY_POINT BYTES` per allocating call (device or pinned host memory), so that a
/// test can check that a run allocated nothing but its arenas.
pub const ALLOCATIONS_VAR: &str = "LMS_CUDA_EMULATOR_ALLOCATIONS";

/// Test only, on the emulated device: with value `1` the device-to-host queue never waits
/// for an event (a swap-out no longer waits for the op that made its tensor), so that the
/// emulated device's hazard check can be seen to report the missing wait.
pub const SKIP_SWAP_OUT_WAITS_VAR: &str = "LMS_CUDA_EMULATOR_SKIP_SWAP_OUT_WAITS";

/// Whether [`SKIP_SWAP_OUT_WAITS_VAR`] drops the device-to-host queue's waits: only on the
/// emulated device.
pub fn skip_swap_out_waits() -> bool {
    emulated() && std::env::var(SKIP_SWAP_OUT_WAITS_VAR).is_ok_and(|v| v == "1")
}

/// Whether the emulated device's libraries replace CUDA's in this process: chosen once,
/// by `LMS_CUDA_EMULATOR=1` or by [`emulate_where_no_driver`] called first.
static EMULATION: OnceLock<bool> = OnceLock::new();

fn emulator_requested() -> bool {
    std::env::var(EMULATOR_VAR).is_ok_and(|v| v == "1")
}

/// Whether the emulated device's libraries replace CUDA's in this process
/// (`LMS_CUDA_EMULATOR=1`, or [`emulate_where_no_driver`] chose them).
pub fn emulated() -> bool {
    *EMULATION.get_or_init(emulator_requested)
}

/// Chooses the emulated device for this process when `LMS_CUDA_EMULATOR=1` or when no
/// CUDA driver can be loaded from the places searched; returns whether it is chosen. The
/// choice is made once per process (threads calling together wait for it), so it only
/// takes effect when called before anything else loads a CUDA library.
pub fn emulate_where_no_driver() -> bool {
    *EMULATION.get_or_init(|| emulator_requested() || load_from(CudaLibrary::Driver, installed_places()).is_err())
}

/// A CUDA library the backend loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CudaLibrary {
    /// The driver API (`libcuda`), installed with the GPU driver.
    Driver,
    /// The run-time compiler of the kernels.
    Nvrtc,
    /// Matrix products.
    Cublas,
    /// Convolutions.
    Cudnn,
}

impl CudaLibrary {
    /// Every library, in the order they are loaded and listed (the driver first).
    pub const ALL: [CudaLibrary; 4] =
        [CudaLibrary::Driver, CudaLibrary::Nvrtc, CudaLibrary::Cublas, CudaLibrary::Cudnn];

    /// The library's name, e.g. `libnvrtc`.
    pub fn name(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "libcuda",
            CudaLibrary::Nvrtc => "libnvrtc",
            CudaLibrary::Cublas => "libcublas",
            CudaLibrary::Cudnn => "libcudnn",
        }
    }

    /// The file names accepted, preferred first.
    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            CudaLibrary::Driver => &["libcuda.so.1", "libcuda.so"],
            CudaLibrary::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12"],
            CudaLibrary::Cublas => &["libcublas.so.13", "libcublas.so.12"],
            CudaLibrary::Cudnn => &["libcudnn.so.9"],
        }
    }

    /// File-name prefixes of the libraries that `soname` opens by name at run time and
    /// that must therefore be loaded first when it is loaded by path.
    fn companions(self, soname: &str) -> Vec<String> {
        let major = soname.rsplit('.').next().unwrap_or_default();
        match self {
            CudaLibrary::Driver => Vec::new(),
            CudaLibrary::Nvrtc => vec![format!("libnvrtc-builtins.so.{major}.")],
            CudaLibrary::Cublas => vec![format!("libcublasLt.so.{major}")],
            CudaLibrary::Cudnn => vec!["libcudnn_".to_string()],
        }
    }
}

impl std::fmt::Display for CudaLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One place a library is looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Where the place comes from, e.g. `LMS_CUDA_LIB_DIR` or `python3 site-packages`.
    pub origin: String,
    /// The folder, or `None` for the dynamic loader's default search.
    pub dir: Option<PathBuf>,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.dir {
            Some(dir) => write!(f, "{} {}", self.origin, dir.display()),
            None => f.write_str(&self.origin),
        }
    }
}

/// A library that was loaded, and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The library.
    pub library: CudaLibrary,
    /// The file loaded (resolved through the process's mappings when the loader found it).
    pub path: PathBuf,
    /// The place that held it.
    pub place: String,
}

/// A library that could not be loaded, with every place tried and why each failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// The library.
    pub library: CudaLibrary,
    /// `(place, why)` per place tried, in search order.
    pub tried: Vec<(String, String)>,
}

/// The places of the search, in order: the emulated device's folder alone when it is
/// chosen ([`emulated`]), else [`installed_places`].
pub fn places() -> &'static [Place] {
    static EMULATOR_PLACES: OnceLock<Vec<Place>> = OnceLock::new();
    if !emulated() {
        return installed_places();
    }
    EMULATOR_PLACES.get_or_init(|| {
        let dir = PathBuf::from(lms_cuda_emulator::LIBRARY_DIR);
        vec![Place { origin: "the emulated device (no GPU)".to_string(), dir: Some(dir) }]
    })
}

/// The places of the installed CUDA libraries, in order, as the environment gives them:
/// `LMS_CUDA_LIB_DIR`, the loader's default, the CUDA toolkit, the Python environments.
/// Computed once per process (finding `python3`'s site-packages runs it).
pub fn installed_places() -> &'static [Place] {
    static PLACES: OnceLock<Vec<Place>> = OnceLock::new();
    PLACES.get_or_init(|| {
        let mut places = Vec::new();
        if let Some(list) = std::env::var_os(LIB_DIR_VAR) {
            for dir in std::env::split_paths(&list).filter(|d| !d.as_os_str().is_empty()) {
                places.extend(with_wheel_folders(LIB_DIR_VAR, &dir));
            }
        }
        places.push(Place { origin: "the dynamic loader's default".into(), dir: None });
        places.extend(toolkit_dirs().into_iter().map(|dir| Place { origin: "CUDA toolkit".into(), dir: Some(dir) }));
        for (origin, site) in python_site_packages() {
            places.extend(with_wheel_folders(&origin, &site));
        }
        dedup(places)
    })
}

/// `dir` itself and the `nvidia/*/lib` folders under it (a site-packages folder or a
/// `pip install --target` folder).
pub fn with_wheel_folders(origin: &str, dir: &Path) -> Vec<Place> {
    let mut places = vec![Place { origin: origin.into(), dir: Some(dir.to_path_buf()) }];
    places.extend(wheel_folders(dir).into_iter().map(|d| Place { origin: origin.into(), dir: Some(d) }));
    places
}

/// The `nvidia/*/lib` folders under `site`, sorted (`cu13` before `cublas` and `cudnn`).
fn wheel_folders(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site.join("nvidia")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("lib")).filter(|d| d.is_dir()).collect();
    dirs.sort();
    dirs
}

/// The CUDA toolkit's library folders: `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` and the
/// versioned `/usr/local/cuda-*` (newest first), and the driver's `/usr/local/nvidia`.
fn toolkit_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> =
        ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    roots.push("/usr/local/cuda".into());
    let mut versioned: Vec<PathBuf> = std::fs::read_dir("/usr/local")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().starts_with("/usr/local/cuda-"))
                .collect()
        })
        .unwrap_or_default();
    versioned.sort_by(|a, b| b.cmp(a));
    roots.extend(versioned);
    let mut dirs = Vec::new();
    for root in roots {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
    }
    dirs.push("/usr/local/nvidia/lib64".into());
    dirs.push("/usr/local/nvidia/lib".into());
    dirs
}

/// The site-packages folders of the Python environments in sight, with where each comes
/// from: `VIRTUAL_ENV` and `CONDA_PREFIX` first, then what `python3` reports.
fn python_site_packages() -> Vec<(String, PathBuf)> {
    let mut sites = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let Some(prefix) = std::env::var_os(var).map(PathBuf::from) else { continue };
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { continue };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.parent().is_some_and(|v| v.to_string_lossy().contains("python")) && p.is_dir())
            .collect();
        found.sort();
        sites.extend(found.into_iter().map(|p| (var.to_string(), p)));
    }
    let script = "import site, sys\nprint('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    if let Ok(out) = std::process::Command::new("python3").args(["-c", script]).output() {
        if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            sites.extend(text.lines().filter(|l| !l.is_empty()).map(|l| ("python3 site-packages".into(), l.into())));
        }
    }
    sites
}

/// The places without repeats of a folder, first occurrence kept.
fn dedup(places: Vec<Place>) -> Vec<Place> {
    let mut seen = std::collections::HashSet::new();
    places.into_iter().filter(|p| seen.insert(p.dir.clone())).collect()
}

/// Handles of every library opened here: never closed, so that the loader keeps
/// returning them to cudarc by name.
fn handles() -> &'static Mutex<Vec<libloading::os::unix::Library>> {
    static HANDLES: OnceLock<Mutex<Vec<libloading::os::unix::Library>>> = OnceLock::new();
    HANDLES.get_or_init(|| Mutex::new(Vec::new()))
}

/// Opens `file` (a path, or a name the loader searches for) globally and keeps it open.
fn open(file: &Path) -> Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: the CUDA libraries' initialisers only set up their own state.
    let library = unsafe { Library::open(Some(file), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| {
        let cause = std::error::Error::source(&e).map(|c| c.to_string()).unwrap_or_else(|| e.to_string());
        one_line(&cause)
    })?;
    handles().lock().unwrap_or_else(|p| p.into_inner()).push(library);
    Ok(())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Loads the companions of `library` (file names starting with one of its prefixes) from
/// `dir`, repeating while one more loads, since they may need each other.
fn open_companions(library: CudaLibrary, soname: &str, dir: &Path) {
    let prefixes = library.companions(soname);
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut pending: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            prefixes.iter().any(|prefix| name.starts_with(prefix.as_str())) && !name.contains(".alt.")
        })
        .collect();
    pending.sort();
    loop {
        let before = pending.len();
        pending.retain(|p| open(p).is_err());
        if pending.is_empty() || pending.len() == before {
            break;
        }
    }
}

/// Tries `library` at each of `places` in order; the first that loads wins.
pub fn load_from(library: CudaLibrary, places: &[Place]) -> Result<Found, Missing> {
    let mut tried = Vec::new();
    for place in places {
        let why = match &place.dir {
            None => {
                let mut errors = Vec::new();
                for soname in library.sonames() {
                    match open(Path::new(soname)) {
                        Ok(()) => {
                            let path = mapped_path(soname).unwrap_or_else(|| PathBuf::from(soname));
                            return Ok(Found { library, path, place: place.to_string() });
                        }
                        Err(e) => errors.push(e),
                    }
                }
                errors.join("; ")
            }
            Some(dir) if !dir.is_dir() => "no such folder".to_string(),
            Some(dir) => match library.sonames().iter().find(|s| dir.join(s).is_file()) {
                None => format!("no {}", library.sonames().join(" or ")),
                Some(soname) => {
                    let path = dir.join(soname);
                    open_companions(library, soname, dir);
                    match open(&path) {
                        Ok(()) => return Ok(Found { library, path, place: place.to_string() }),
                        Err(e) => e,
                    }
                }
            },
        };
        tried.push((place.to_string(), why));
    }
    Err(Missing { library, tried })
}

/// The file mapped into this process whose name starts like `soname` (`libcuda.so.1`
/// → a mapped `libcuda.so.*`), for reporting where the loader found a library.
fn mapped_path(soname: &str) -> Option<PathBuf> {
    let stem = soname.split(".so").next()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|line| line.split_whitespace().nth(5)).map(PathBuf::from).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(stem) && n[stem.len()..].starts_with(".so"))
    })
}

/// The libraries loaded so far in this process.
fn loaded() -> &'static Mutex<HashMap<CudaLibrary, Found>> {
    static LOADED: OnceLock<Mutex<HashMap<CudaLibrary, Found>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Loads `library` from [`places`] once per process.
pub fn load(library: CudaLibrary) -> Result<Found, Missing> {
    let mut cache = loaded().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = cache.get(&library) {
        return Ok(found.clone());
    }
    let found = load_from(library, places())?;
    cache.insert(library, found.clone());
    Ok(found)
}

/// Loads every library of `libraries`; when any is missing, one line naming the missing
/// ones ([`missing_line`]).
pub fn require(libraries: &[CudaLibrary]) -> Result<Vec<Found>, String> {
    let results: Vec<Result<Found, Missing>> = libraries.iter().map(|&l| load(l)).collect();
    if results.iter().all(Result::is_ok) {
        return Ok(results.into_iter().flatten().collect());
    }
    Err(missing_line(&results))
}

/// One line for libraries of which some are missing: the missing ones, how many places
/// were searched, and where the whole [`listing`] is (`lms doctor`), so an error stays
/// on one line.
pub fn missing_line(results: &[Result<Found, Missing>]) -> String {
    let missing: Vec<&Missing> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let names: Vec<&str> = missing.iter().map(|m| m.library.name()).collect();
    let places = missing.first().map_or(0, |m| m.tried.len());
    format!(
        "cannot load {} (searched {places} places; `lms doctor` lists them); set {LIB_DIR_VAR} to the \
         folders holding them, or use --device cpu",
        names.join(", ")
    )
}

/// The message for libraries of which some are missing: the missing ones named first,
/// then per library where it was found or every place tried and why it failed.
pub fn listing(results: &[Result<Found, Missing>]) -> String {
    let missing: Vec<&str> = results.iter().filter_map(|r| r.as_ref().err()).map(|m| m.library.name()).collect();
    let mut s = format!("cannot load {}; searched:", missing.join(", "));
    for result in results {
        match result {
            Ok(found) => {
                let _ = write!(s, "\n  {}: found {} ({})", found.library, found.path.display(), found.place);
            }
            Err(m) => {
                let _ = write!(s, "\n  {} ({}): not found", m.library, m.library.sonames().join(", "));
                for (place, why) in &m.tried {
                    let _ = write!(s, "\n    {place}: {why}");
                }
            }
        }
    }
    let _ = write!(
        s,
        "\nset {LIB_DIR_VAR} to the folders holding them (a site-packages folder also works), or use --device cpu"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_lists_every_place_tried() {
        let empty = std::env::temp_dir().join(format!("lms-loader-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let places = vec![
            Place { origin: LIB_DIR_VAR.into(), dir: Some(empty.clone()) },
            Place { origin: LIB_DIR_VAR.into(), dir: Some(empty.join("absent")) },
        ];
        let missing = load_from(CudaLibrary::Cublas, &places).unwrap_err();
        assert_eq!(
            missing.tried,
            vec![
                (format!("{LIB_DIR_VAR} {}", empty.display()), "no libcublas.so.13 or libcublas.so.12".to_string()),
                (format!("{LIB_DIR_VAR} {}", empty.join("absent").display()), "no such folder".to_string()),
            ]
        );
        let message = listing(&[Err(missing)]);
        assert!(message.starts_with("cannot load libcublas; searched:"), "{message}");
        assert!(message.contains(&format!("{LIB_DIR_VAR} {}: no such folder", empty.join("absent").display())));
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn a_folder_is_searched_with_its_wheel_folders() {
        let root = std::env::temp_dir().join(format!("lms-loader-site-{}", std::process::id()));
        for sub in ["nvidia/cudnn/lib", "nvidia/cu13/lib", "nvidia/empty"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let dirs: Vec<PathBuf> = with_wheel_folders("x", &root).into_iter().filter_map(|p| p.dir).collect();
        assert_eq!(dirs, vec![root.clone(), root.join("nvidia/cu13/lib"), root.join("nvidia/cudnn/lib")]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_loader_default_comes_after_the_variable_and_before_the_toolkit() {
        let places = installed_places();
        let default = places.iter().position(|p| p.dir.is_none()).expect("the loader's default is searched");
        assert!(places[..default].iter().all(|p| p.origin == LIB_DIR_VAR));
        let toolkit = places.iter().position(|p| p.origin == "CUDA toolkit").expect("toolkit folders are searched");
        assert!(default < toolkit);
    }
}
