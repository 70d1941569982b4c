//! Decoding within bounds. Prost allocates as it decodes, and an empty message of two bytes
//! on the wire becomes a struct of a hundred bytes or more in a vector, so a small file of
//! empty messages would take hundreds of times its size before any check could look at it.
//! [`decode`] first walks the wire form once, allocating nothing, and adds up the most the
//! decoded structures can hold:
//! - each message: the size of its struct (nothing for a singular one inline in its parent,
//!   whose struct holds it; prost merges a singular message that comes again);
//! - each string: its length (at least 8, a vector's smallest capacity), three times that
//!   when the same singular field comes again (the old buffer and a doubled one); bytes
//!   twice as much (prost copies them out of the input, then into the field);
//! - each element of a repeated field: three times its size (a vector's capacity is at most
//!   twice its length, and while it grows the old buffer is held too), the first of a field
//!   in a message four times (a vector's smallest capacity).
//!
//! A file whose sum is over an expansion ([`ONNX_EXPANSION`], [`LMS_EXPANSION`]) times its
//! size plus [`SLACK_BYTES`] is refused before prost decodes anything; otherwise the sum
//! bounds what decoding allocates. The walk
//! follows the layouts build.rs generates from the schemas (`layouts.rs`), so it counts every
//! field prost decodes and skips what prost skips.

use crate::Message;

/// Most bytes decoding an ONNX model may take per byte of the file: weightless models decode
/// to at most about 23 times their size (the fixtures' ImageNet graphs, whose nodes and
/// attributes are a few bytes each on the wire), shape annotations to about 27.
pub const ONNX_EXPANSION: u64 = 48;

/// Most bytes decoding a `.lms` file may take per byte of the file: files lms writes decode
/// to at most about 15 times their size (a graph without weight data), 3 with its weights.
pub const LMS_EXPANSION: u64 = 24;

/// Bytes decoding may take on top of its expansion times the input's size, so that small
/// files, whose top-level struct alone is hundreds of bytes, decode.
pub const SLACK_BYTES: u64 = 1 << 20;

/// Nesting prost refuses to decode past (its recursion limit).
const MAX_DEPTH: u32 = 100;

/// How a message is laid out on the wire and in memory.
#[derive(Debug)]
pub struct Layout {
    /// The message's fully qualified name (`onnx.NodeProto`).
    pub name: &'static str,
    /// Size of the decoded struct.
    pub size: usize,
    /// The fields prost decodes; others are skipped.
    pub fields: &'static [Field],
}

/// One field of a [`Layout`].
#[derive(Debug)]
pub struct Field {
    /// The field number.
    pub number: u32,
    /// Whether the field is repeated (decoded into a vector).
    pub repeated: bool,
    /// What its values are.
    pub kind: Kind,
}

/// What a field's values are.
#[derive(Debug)]
pub enum Kind {
    /// A nested message, in a `Box` or inline in its parent (when singular).
    Message {
        /// The nested message's layout.
        layout: &'static Layout,
        /// Whether a singular field holds it in a `Box`.
        boxed: bool,
    },
    /// A string (decoded by one copy).
    String,
    /// Bytes (decoded by two copies: prost copies them out, then into the field).
    Bytes,
    /// A number encoded as a varint, `size` bytes in memory.
    Varint {
        /// Bytes of the decoded value.
        size: u64,
    },
    /// A number of `width` bytes on the wire and `size` in memory.
    Fixed {
        /// Bytes on the wire.
        width: u64,
        /// Bytes of the decoded value.
        size: u64,
    },
}

/// A prost message with a generated [`Layout`].
pub trait Bounded: Message + Default {
    /// The message's layout.
    fn layout() -> &'static Layout;
}

include!("generated/layouts.rs");

/// Why bytes were not decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The wire form cannot be walked (a truncated value, a length past the end).
    #[error("malformed protobuf at byte {offset}: {reason}")]
    Malformed {
        /// Where the walk stopped.
        offset: usize,
        /// What was wrong there.
        reason: &'static str,
    },
    /// The decoded structures would take more than the bound.
    #[error(
        "its {size} bytes would take more than {limit} bytes decoded ({expansion} times its size plus 1 MiB), past byte {offset} in {message}"
    )]
    TooLarge {
        /// The input's size.
        size: usize,
        /// The expansion allowed.
        expansion: u64,
        /// The bound.
        limit: u64,
        /// Where the sum went over the bound.
        offset: usize,
        /// The message being walked there.
        message: &'static str,
    },
    /// Prost refused the bytes.
    #[error("{0}")]
    Prost(#[from] prost::DecodeError),
}

/// Decodes `bytes` as `M` when the decoded structures fit in `expansion` times their size
/// plus [`SLACK_BYTES`].
pub fn decode<M: Bounded>(bytes: &[u8], expansion: u64) -> Result<M, DecodeError> {
    decoded_bytes(bytes, M::layout(), expansion)?;
    Ok(M::decode(bytes)?)
}

/// The most bytes the structures decoded from `bytes` as a message of `layout` can take,
/// refusing at once a sum over `expansion` times the size of `bytes` plus [`SLACK_BYTES`].
pub fn decoded_bytes(bytes: &[u8], layout: &'static Layout, expansion: u64) -> Result<u64, DecodeError> {
    let limit = expansion.saturating_mul(bytes.len() as u64).saturating_add(SLACK_BYTES);
    let mut walk = Walk { bytes, at: 0, total: layout.size as u64, expansion, limit };
    walk.over(layout)?;
    walk.message(layout, bytes.len(), 0)?;
    Ok(walk.total)
}

/// A walk over the wire form, summing as it goes.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    total: u64,
    expansion: u64,
    limit: u64,
}

/// Wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LENGTH: u64 = 2;
const GROUP_START: u64 = 3;
const GROUP_END: u64 = 4;
const FIXED32: u64 = 5;

impl Walk<'_> {
    fn malformed(&self, reason: &'static str) -> DecodeError {
        DecodeError::Malformed { offset: self.at, reason }
    }

    /// Adds `bytes` to the sum, refusing a sum over the limit.
    fn add(&mut self, bytes: u64, layout: &'static Layout) -> Result<(), DecodeError> {
        self.total = self.total.saturating_add(bytes);
        self.over(layout)
    }

    fn over(&self, layout: &'static Layout) -> Result<(), DecodeError> {
        if self.total > self.limit {
            return Err(DecodeError::TooLarge {
                size: self.bytes.len(),
                expansion: self.expansion,
                limit: self.limit,
                offset: self.at,
                message: layout.name,
            });
        }
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in 0..10 {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(self.malformed("truncated varint"));
            };
            self.at += 1;
            value |= u64::from(b & 0x7f) << (7 * shift);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(self.malformed("varint longer than 10 bytes"))
    }

    /// Skips `length` bytes, which must be there.
    fn skip(&mut self, length: u64) -> Result<(), DecodeError> {
        match usize::try_from(length).ok().and_then(|l| self.at.checked_add(l)) {
            Some(end) if end <= self.bytes.len() => {
                self.at = end;
                Ok(())
            }
            _ => Err(self.malformed("length past the end")),
        }
    }

    /// Walks the fields of a message of `layout` up to byte `end`, at nesting `depth`.
    fn message(&mut self, layout: &'static Layout, end: usize, depth: u32) -> Result<(), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(self.malformed("messages nested too deep"));
        }
        // Fields that already hold a value in this message, by their index in the layout
        // (past 64: never).
        let mut seen = 0u64;
        while self.at < end {
            let key = self.varint()?;
            let (number, wire) = (key >> 3, key & 7);
            let Some(index) = layout.fields.iter().position(|f| u64::from(f.number) == number) else {
                self.skip_value(number, wire, depth)?;
                continue;
            };
            let field = &layout.fields[index];
            let first = index >= 64 || seen & (1 << index) == 0;
            let added = match (wire, &field.kind) {
                (LENGTH, _) => {
                    let length = self.varint()?;
                    let start = self.at;
                    self.skip(length)?;
                    self.length_delimited(layout, field, first, start, depth)?
                }
                (_, Kind::Varint { size } | Kind::Fixed { size, .. }) if field.repeated => {
                    let added = element(*size, 1, first);
                    self.add(added, layout)?;
                    self.skip_value(number, wire, depth)?;
                    added
                }
                _ => {
                    self.skip_value(number, wire, depth)?;
                    0
                }
            };
            if added > 0 && index < 64 {
                seen |= 1 << index;
            }
        }
        if self.at != end {
            return Err(self.malformed("field past the end of its message"));
        }
        Ok(())
    }

    /// Counts a length-delimited value of `field` at `start..self.at`, and the message it
    /// holds; returns the bytes the value itself takes in its parent.
    fn length_delimited(
        &mut self,
        layout: &'static Layout,
        field: &Field,
        first: bool,
        start: usize,
        depth: u32,
    ) -> Result<u64, DecodeError> {
        let length = (self.at - start) as u64;
        let added = match (&field.kind, field.repeated) {
            (Kind::Message { layout: inner, boxed }, repeated) => {
                let size = inner.size as u64;
                let added = match (repeated, boxed) {
                    (true, _) => element(size, 1, first),
                    // Prost merges a repeated singular message into the one it holds.
                    (false, true) if first => size,
                    (false, _) => 0,
                };
                self.add(added, layout)?;
                let end = self.at;
                self.at = start;
                self.message(inner, end, depth + 1)?;
                return Ok(added);
            }
            (Kind::String | Kind::Bytes, true) => {
                element(std::mem::size_of::<Vec<u8>>() as u64, 1, first) + copies(&field.kind) * buffer(length)
            }
            (Kind::String | Kind::Bytes, false) if first => copies(&field.kind) * buffer(length),
            (Kind::String | Kind::Bytes, false) => (copies(&field.kind) + 2) * buffer(length),
            (Kind::Varint { size }, true) => {
                let count = self.bytes[start..self.at].iter().filter(|&&b| b < 0x80).count() as u64;
                element(*size, count, first)
            }
            (Kind::Fixed { width, size }, true) => element(*size, length / width, first),
            // A packed value in a singular number field: prost refuses it.
            (Kind::Varint { .. } | Kind::Fixed { .. }, false) => 0,
        };
        self.add(added, layout)?;
        Ok(added)
    }

    /// Skips a value of wire type `wire` as prost does for a field it does not decode.
    fn skip_value(&mut self, number: u64, wire: u64, depth: u32) -> Result<(), DecodeError> {
        match wire {
            VARINT => self.varint().map(|_| ()),
            FIXED64 => self.skip(8),
            LENGTH => {
                let length = self.varint()?;
                self.skip(length)
            }
            FIXED32 => self.skip(4),
            GROUP_START => {
                if depth >= MAX_DEPTH {
                    return Err(self.malformed("groups nested too deep"));
                }
                loop {
                    let key = self.varint()?;
                    if key & 7 == GROUP_END {
                        return if key >> 3 == number { Ok(()) } else { Err(self.malformed("unmatched end of group")) };
                    }
                    self.skip_value(key >> 3, key & 7, depth + 1)?;
                }
            }
            GROUP_END => Err(self.malformed("end of a group that did not start")),
            _ => Err(self.malformed("unknown wire type")),
        }
    }
}

/// Bytes `count` more elements of `size` bytes take in a vector, `first` when the vector
/// was empty: three times their size, at least four elements or 8 bytes for the first.
fn element(size: u64, count: u64, first: bool) -> u64 {
    if count == 0 {
        return 0;
    }
    let grown = 3 * size * count;
    if first {
        grown.max(4 * size).max(8)
    } else {
        grown
    }
}

/// How many buffers of its length decoding a string or bytes value holds at once.
fn copies(kind: &Kind) -> u64 {
    if matches!(kind, Kind::Bytes) {
        2
    } else {
        1
    }
}

/// Bytes a string or bytes value of `length` takes: a buffer of at least 8 bytes.
fn buffer(length: u64) -> u64 {
    if length == 0 {
        0
    } else {
        length.max(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lms::{Graph, Tensor};

    fn counted(bytes: &[u8]) -> Result<u64, DecodeError> {
        decoded_bytes(bytes, Graph::layout(), u64::MAX)
    }

    #[test]
    fn counts_structs_vectors_and_buffers() {
        let graph = std::mem::size_of::<Graph>() as u64;
        let tensor = std::mem::size_of::<Tensor>() as u64;
        assert_eq!(counted(&[]).unwrap(), graph);
        // One empty tensor: a vector of at least four; a second: three more.
        assert_eq!(counted(&[0x1a, 0]).unwrap(), graph + 4 * tensor);
        assert_eq!(counted(&[0x1a, 0, 0x1a, 0]).unwrap(), graph + 7 * tensor);
        // A name of 3 bytes takes a buffer of 8; the same field again, three times its own.
        assert_eq!(counted(&[0x12, 3, b'a', b'b', b'c']).unwrap(), graph + 8);
        assert_eq!(counted(&[0x12, 1, b'a', 0x12, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap(), graph + 8 + 27);
        // A packed schedule of three varints (u32): three times 4 bytes each; data bytes twice,
        // in a buffer of at least 8.
        assert_eq!(counted(&[0x4a, 4, 1, 0x80, 1, 2]).unwrap(), graph + 36);
        assert_eq!(counted(&[0x1a, 4, 0x2a, 2, 7, 7]).unwrap(), graph + 4 * tensor + 16);
        // Unknown fields are skipped, groups included, and cost nothing.
        assert_eq!(counted(&[0xf8, 1, 5, 0xfb, 1, 0x08, 1, 0xfc, 1]).unwrap(), graph);
    }

    #[test]
    fn refuses_malformed_wire_forms_and_sums_over_the_limit() {
        for (bytes, reason) in [
            (&[0x1a][..], "truncated varint"),
            (&[0x1a, 5, 0], "length past the end"),
            (&[0xfb, 1, 0xf4, 1], "unmatched end of group"),
            (&[0x0c], "end of a group that did not start"),
            (&[0x0e], "unknown wire type"),
        ] {
            match counted(bytes) {
                Err(DecodeError::Malformed { reason: r, .. }) => assert_eq!(r, reason, "{bytes:?}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
        // Nesting deeper than prost decodes: an unknown group inside itself, 200 levels.
        let deep: Vec<u8> = [0xfb, 1].repeat(200).into_iter().chain([0xfc, 1].repeat(200)).collect();
        assert!(matches!(counted(&deep), Err(DecodeError::Malformed { .. })));
        let empty_tensors = [0x1a, 0].repeat(1 << 20);
        let err = decode::<Graph>(&empty_tensors, LMS_EXPANSION).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { message: "lms.Graph", .. }), "{err}");
        assert!(err.to_string().contains("24 times its size plus 1 MiB"), "{err}");
        assert!(decode::<Graph>(&[0x1a, 0].repeat(1 << 10), LMS_EXPANSION).is_ok());
    }
}
