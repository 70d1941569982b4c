//! lms runtime.
