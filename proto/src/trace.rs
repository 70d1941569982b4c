//! The Chrome-trace (Perfetto) format of a step's timeline, shared by the
//! compiler's predicted timeline and the runtime's measured one, so the two
//! open side by side in `chrome://tracing` or Perfetto.
//!
//! One process per trace, one thread per [`Lane`]; every event is a complete
//! event (`"ph": "X"`) with a start and a duration in microseconds.

use std::fmt::Write;

/// The stream an event ran on: the three queues of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// Kernels, in schedule order.
    Compute,
    /// Swap-outs: device-to-host copies.
    DeviceToHost,
    /// Swap-ins: host-to-device copies.
    HostToDevice,
}

impl Lane {
    /// Every lane, in the order they are drawn.
    pub const ALL: [Lane; 3] = [Lane::Compute, Lane::DeviceToHost, Lane::HostToDevice];

    /// The lane's thread name in the trace.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Compute => "compute",
            Lane::DeviceToHost => "device-to-host",
            Lane::HostToDevice => "host-to-device",
        }
    }

    /// The lane's thread id in the trace.
    pub fn tid(self) -> u32 {
        match self {
            Lane::Compute => 1,
            Lane::DeviceToHost => 2,
            Lane::HostToDevice => 3,
        }
    }
}

/// One op or copy on one lane.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEvent {
    /// The node's name.
    pub name: String,
    /// The op type (the event's category).
    pub op: String,
    pub lane: Lane,
    /// Start, in microseconds from the start of the step.
    pub start_us: f64,
    /// Duration in microseconds.
    pub dur_us: f64,
    /// Extra facts shown when the event is selected (bytes, stall, ...).
    pub args: Vec<(String, String)>,
}

/// The trace as Chrome-trace JSON: `{"traceEvents": [...]}` with thread-name
/// metadata for every lane, then the events in the order given.
pub fn to_chrome_json(process: &str, events: &[TraceEvent]) -> String {
    let mut s = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    let _ = write!(s, "{{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}", quote(process));
    for lane in Lane::ALL {
        let _ = write!(
            s,
            ",\n{{\"ph\":\"M\",\"pid\":1,\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
            lane.tid(),
            quote(lane.name())
        );
    }
    for e in events {
        let _ = write!(
            s,
            ",\n{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"name\":{},\"cat\":{},\"ts\":{},\"dur\":{},\"args\":{{",
            e.lane.tid(),
            quote(&e.name),
            quote(&e.op),
            number(e.start_us),
            number(e.dur_us)
        );
        for (i, (k, v)) in e.args.iter().enumerate() {
            let _ = write!(s, "{}{}:{}", if i > 0 { "," } else { "" }, quote(k), quote(v));
        }
        s.push_str("}}");
    }
    s.push_str("\n]}\n");
    s
}

/// A JSON number; non-finite values (which JSON lacks) become 0.
fn number(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "0".into()
    }
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_lanes_and_escapes_names() {
        let events = [TraceEvent {
            name: "conv \"1\"".into(),
            op: "Conv".into(),
            lane: Lane::HostToDevice,
            start_us: 1.5,
            dur_us: 2.0,
            args: vec![("bytes".into(), "16".into())],
        }];
        let json = to_chrome_json("step", &events);
        assert!(json.contains("\"name\":\"conv \\\"1\\\"\""));
        assert!(json.contains("\"tid\":3,\"name\":\"thread_name\",\"args\":{\"name\":\"host-to-device\"}"));
        assert!(json.contains("\"ts\":1.500,\"dur\":2.000,\"args\":{\"bytes\":\"16\"}"));
        assert!(json.starts_with("{\"displayTimeUnit\""));
    }
}
