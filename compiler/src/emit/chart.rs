//! The pieces every picture lms draws is made of (`simulate --svg`,
//! `plan-curve --svg`, the HTML report): scales with ticks at round values,
//! a plot box with its grid and titled axes, reference lines (budgets)
//! labelled in the right margin where no curve can run under the label,
//! titles wrapped to the picture's width, markers, a legend of swatches,
//! an opaque background, and XML escaping.

use std::fmt::Write;

/// Width of one character of 12 px sans-serif text, rounded up: what
/// wrapping and margins assume.
pub const CHAR_WIDTH: f64 = 7.0;
/// Height of one line of text.
pub const LINE: f64 = 18.0;
/// Width of the right margin that holds reference lines' labels.
pub const LABEL_MARGIN: f64 = 120.0;

/// Escapes text for XML and HTML.
pub fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

/// A value for people: at most three decimals, no trailing zeros.
pub fn number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The unit an axis shows its values in: a value `v` reads `v / scale` `name`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    pub scale: f64,
    pub name: &'static str,
}

impl Unit {
    /// The binary byte unit in which `max` bytes reads 1 or more.
    pub fn bytes(max: f64) -> Unit {
        let units = [(1u64 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        let found = units.into_iter().map(|(scale, name)| Unit { scale: scale as f64, name }).find(|u| max >= u.scale);
        found.unwrap_or(Unit { scale: 1.0, name: "B" })
    }

    /// The time unit in which `max` seconds reads 1 or more.
    pub fn seconds(max: f64) -> Unit {
        let units = [(1.0, "s"), (1e-3, "ms")];
        let found = units.into_iter().map(|(scale, name)| Unit { scale, name }).find(|u| max >= u.scale);
        found.unwrap_or(Unit { scale: 1e-6, name: "µs" })
    }

    /// A multiple of a reference (the step of an unrewritten graph).
    pub const RATIO: Unit = Unit { scale: 1.0, name: "×" };

    /// `v` in this unit, e.g. `1.5 GiB`, `2×`.
    pub fn label(&self, v: f64) -> String {
        match self.name {
            "×" => format!("{}×", number(v / self.scale)),
            name => format!("{} {name}", number(v / self.scale)),
        }
    }
}

/// One axis: the values from `start` to `end` and the round values on it
/// that get a tick, a grid line and a label.
#[derive(Clone, Debug, PartialEq)]
pub struct Scale {
    pub start: f64,
    pub end: f64,
    pub ticks: Vec<f64>,
    pub unit: Unit,
}

impl Scale {
    /// From `start` to the first round value at or above `max`: the axis
    /// ends on a tick (memory, ratios).
    pub fn to_tick(start: f64, max: f64, unit: Unit) -> Scale {
        let step = round_step((max - start) / unit.scale, 5.0) * unit.scale;
        let first = (start / step + 1e-9).floor();
        let count = ((max - first * step) / step - 1e-9).ceil().max(1.0) as usize;
        let ticks: Vec<f64> = (0..=count).map(|i| (first + i as f64) * step).collect();
        Scale { start: ticks[0], end: *ticks.last().expect("at least two ticks"), ticks, unit }
    }

    /// From `start` to exactly `end` (time that ends with the step, the
    /// budgets a curve was measured at), ticks at the round values between.
    pub fn exact(start: f64, end: f64, unit: Unit) -> Scale {
        let end = if end > start { end } else { start + unit.scale };
        let step = round_step((end - start) / unit.scale, 8.0) * unit.scale;
        let first = (start / step - 1e-9).ceil() as i64;
        let last = (end / step + 1e-9).floor() as i64;
        let ticks = (first..=last).map(|i| i as f64 * step).collect();
        Scale { start, end, ticks, unit }
    }

    /// Where `v` lies between start (0) and end (1).
    pub fn fraction(&self, v: f64) -> f64 {
        (v - self.start) / (self.end - self.start).max(f64::MIN_POSITIVE)
    }
}

/// A round step (1, 2 or 5 times a power of ten) that cuts `span` into at
/// most `parts` parts.
fn round_step(span: f64, parts: f64) -> f64 {
    let raw = if span > 0.0 { span / parts } else { 1.0 / parts };
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|&s| s >= raw * (1.0 - 1e-9)).unwrap_or(raw)
}

/// A plot box in the picture and the scales of its two axes.
#[derive(Clone, Debug)]
pub struct Plot {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
    pub x: Scale,
    pub y: Scale,
}

impl Plot {
    /// The picture's x of value `v` on the x axis.
    pub fn x(&self, v: f64) -> f64 {
        self.left + self.x.fraction(v) * self.width
    }

    /// The picture's y of value `v` on the y axis.
    pub fn y(&self, v: f64) -> f64 {
        self.top + self.height - self.y.fraction(v) * self.height
    }

    pub fn right(&self) -> f64 {
        self.left + self.width
    }

    pub fn bottom(&self) -> f64 {
        self.top + self.height
    }

    /// The y axis (grid lines, labelled ticks, title turned up the left
    /// edge) and the frame; `name` tells this plot's axes apart
    /// (`data-panel`).
    pub fn y_axis(&self, out: &mut String, name: &str, title: &str) {
        let _ = writeln!(out, r#"<g class="axis y" data-panel="{}">"#, escape(name));
        for &v in &self.y.ticks {
            let y = self.y(v);
            let _ = writeln!(
                out,
                r##"<line class="grid" x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                self.left - 4.0,
                self.right(),
                self.left - 8.0,
                y + 4.0,
                self.y.unit.label(v),
            );
        }
        let mid = self.top + self.height / 2.0;
        let _ = writeln!(
            out,
            r#"<text class="axis-title" x="16" y="{mid:.1}" text-anchor="middle" transform="rotate(-90 16 {mid:.1})">{}</text></g>"#,
            escape(title)
        );
        let _ = writeln!(
            out,
            r##"<rect class="frame" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#999"/>"##,
            self.left, self.top, self.width, self.height
        );
    }

    /// The x axis: grid lines from this plot's top down to `grid_bottom`,
    /// labelled ticks under `label_y` and the axis title under them.
    pub fn x_axis(&self, out: &mut String, title: &str, grid_bottom: f64, label_y: f64) {
        let _ = writeln!(out, r#"<g class="axis x">"#);
        for &v in &self.x.ticks {
            let x = self.x(v);
            let _ = writeln!(
                out,
                r##"<line class="grid" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{grid_bottom:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                self.top,
                label_y + 16.0,
                self.x.unit.label(v)
            );
        }
        let _ = writeln!(
            out,
            r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text></g>"#,
            self.left + self.width / 2.0,
            label_y + 36.0,
            escape(title)
        );
    }

    /// A dashed horizontal line across the plot at `value` (a budget),
    /// its label in the right margin, one line of text per entry of
    /// `label`. A value above the axis's end draws no line: the label
    /// sits at the top and says it is off the scale.
    pub fn reference(&self, out: &mut String, class: &str, value: f64, label: &[String]) {
        let on_scale = value <= self.y.end;
        let y = if on_scale { self.y(value) } else { self.top };
        let hover = label.join(" ");
        let _ = write!(out, r#"<g class="{}"><title>{}</title>"#, escape(class), escape(&hover));
        if on_scale {
            let _ = write!(
                out,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#000" stroke-dasharray="6 4"/>"##,
                self.left,
                self.right()
            );
        }
        let mut lines: Vec<String> = label.to_vec();
        if !on_scale {
            lines.push("(above this scale)".to_string());
        }
        // The label's first line sits on the line's height, kept inside the plot's height.
        let block = lines.len() as f64 * 14.0;
        let first = (y + 4.0).clamp(self.top + 10.0, (self.bottom() - block + 14.0).max(self.top + 10.0));
        for (i, text) in lines.iter().enumerate() {
            let _ = write!(
                out,
                r#"<text class="reference-label" x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
                self.right() + 6.0,
                first + i as f64 * 14.0,
                escape(text)
            );
        }
        out.push_str("</g>\n");
    }
}

/// An opaque white background for a picture of `width` × `height`.
pub fn background(out: &mut String, width: f64, height: f64) {
    let _ = writeln!(out, r##"<rect class="background" x="0" y="0" width="{width}" height="{height}" fill="#fff"/>"##);
}

/// `text` cut into lines of at most `width` pixels at spaces (a word
/// longer than a line is cut where the line ends).
pub fn wrap(text: &str, width: f64) -> Vec<String> {
    let max = ((width / CHAR_WIDTH).floor() as usize).max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > max {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..max).collect());
        }
        let word: String = word.into_iter().collect();
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The picture's title at (`x`, first baseline 20), wrapped to `width`
/// pixels; returns the y under its last line.
pub fn title(out: &mut String, text: &str, x: f64, width: f64) -> f64 {
    let lines = wrap(text, width);
    let _ = write!(out, r#"<g class="title">"#);
    for (i, line) in lines.iter().enumerate() {
        let _ = write!(out, r#"<text x="{x:.1}" y="{:.1}">{}</text>"#, 20.0 + i as f64 * LINE, escape(line));
    }
    out.push_str("</g>\n");
    20.0 + lines.len() as f64 * LINE
}

/// The shape that marks a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    /// A point where nothing fits.
    Cross,
}

impl Marker {
    /// The marker centred on (`cx`, `cy`); `title` is its hover text.
    pub fn draw(self, out: &mut String, cx: f64, cy: f64, color: &str, class: &str, title: &str) {
        let title = escape(title);
        let _ = match self {
            Marker::Circle => writeln!(
                out,
                r#"<circle class="{class}" cx="{cx:.1}" cy="{cy:.1}" r="3.5" fill="{color}"><title>{title}</title></circle>"#
            ),
            Marker::Square => writeln!(
                out,
                r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="7" height="7" fill="{color}"><title>{title}</title></rect>"#,
                cx - 3.5,
                cy - 3.5
            ),
            Marker::Cross => writeln!(
                out,
                r#"<path class="{class}" d="M{:.1},{:.1}l8,8m0,-8l-8,8" stroke="{color}" stroke-width="2" fill="none"><title>{title}</title></path>"#,
                cx - 4.0,
                cy - 4.0
            ),
        };
    }
}

/// What a legend line shows before its text.
#[derive(Clone, Debug, PartialEq)]
pub enum Swatch {
    /// A line (dashed or not), with the marker its points carry.
    Line { color: String, dashed: bool, marker: Option<Marker> },
    /// A filled bar (a stream's work).
    Bar { color: String },
    /// A marker alone.
    Marker { color: String, marker: Marker },
}

/// One line of a legend.
#[derive(Clone, Debug, PartialEq)]
pub struct LegendEntry {
    pub swatch: Swatch,
    pub text: String,
}

/// The legend's lines from `top`, swatches at `x`; returns the y under it.
pub fn legend(out: &mut String, entries: &[LegendEntry], x: f64, top: f64) -> f64 {
    let _ = writeln!(out, r#"<g class="legend">"#);
    for (i, entry) in entries.iter().enumerate() {
        let mid = top + i as f64 * LINE + LINE / 2.0;
        match &entry.swatch {
            Swatch::Line { color, dashed, marker } => {
                let dash = if *dashed { r#" stroke-dasharray="5 3""# } else { "" };
                let _ = write!(
                    out,
                    r#"<line x1="{x:.1}" y1="{mid:.1}" x2="{:.1}" y2="{mid:.1}" stroke="{color}" stroke-width="2"{dash}/>"#,
                    x + 28.0
                );
                if let Some(marker) = marker {
                    marker.draw(out, x + 14.0, mid, color, "swatch", &entry.text);
                }
            }
            Swatch::Bar { color } => {
                let _ = write!(out, r#"<rect x="{x:.1}" y="{:.1}" width="28" height="12" fill="{color}"/>"#, mid - 6.0);
            }
            Swatch::Marker { color, marker } => marker.draw(out, x + 14.0, mid, color, "swatch", &entry.text),
        }
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, x + 36.0, mid + 4.0, escape(&entry.text));
    }
    out.push_str("</g>\n");
    top + entries.len() as f64 * LINE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_to_a_tick_ends_on_the_first_round_value_above_the_maximum() {
        let s = Scale::to_tick(0.0, 11.6e-3, Unit::seconds(11.6e-3));
        assert_eq!(s.unit.name, "ms");
        assert_eq!(s.ticks.iter().map(|t| s.unit.label(*t)).collect::<Vec<_>>(), ["0 ms", "5 ms", "10 ms", "15 ms"]);
        let gib = Scale::to_tick(0.0, 5.3 * (1u64 << 30) as f64, Unit::bytes(5.3 * (1u64 << 30) as f64));
        assert_eq!(gib.unit.label(gib.end), "6 GiB");
        assert!(gib.ticks.len() >= 4);
    }

    #[test]
    fn an_exact_scale_ends_at_its_end_and_ticks_only_inside() {
        let s = Scale::exact(0.0, 11.6e-3, Unit::seconds(11.6e-3));
        assert_eq!(s.end, 11.6e-3);
        assert_eq!(
            s.ticks.iter().map(|t| s.unit.label(*t)).collect::<Vec<_>>(),
            ["0 ms", "2 ms", "4 ms", "6 ms", "8 ms", "10 ms"]
        );
        let budgets = Scale::exact(1.03 * 1048576.0, 2.59 * 1048576.0, Unit::bytes(2.59 * 1048576.0));
        assert!(budgets.ticks.iter().all(|&t| t >= budgets.start && t <= budgets.end), "{budgets:?}");
        assert!(budgets.ticks.len() >= 3, "{budgets:?}");
        let flat = Scale::exact(5.0, 5.0, Unit::RATIO);
        assert!(flat.end > flat.start);
    }

    #[test]
    fn titles_wrap_at_spaces_and_cut_words_longer_than_a_line() {
        let lines = wrap("tiny_gpt on h100-sxm: predicted step over the unrewritten step against device budget", 300.0);
        assert!(lines.len() >= 2 && lines.iter().all(|l| l.chars().count() as f64 * CHAR_WIDTH <= 300.0), "{lines:?}");
        assert_eq!(
            lines.join(" "),
            "tiny_gpt on h100-sxm: predicted step over the unrewritten step against device budget"
        );
        let long = "x".repeat(100);
        let cut = wrap(&long, 140.0);
        assert_eq!(cut.concat(), long);
        assert!(cut.iter().all(|l| l.len() <= 20));
    }

    #[test]
    fn a_reference_above_the_scale_says_so_and_draws_no_line() {
        let plot = Plot {
            left: 100.0,
            top: 50.0,
            width: 500.0,
            height: 200.0,
            x: Scale::exact(0.0, 1.0, Unit::seconds(1.0)),
            y: Scale::to_tick(0.0, 2.0 * 1048576.0, Unit::bytes(2.0 * 1048576.0)),
        };
        let mut out = String::new();
        plot.reference(&mut out, "budget", 64.0 * (1u64 << 30) as f64, &["host budget".into(), "64 GiB".into()]);
        assert!(!out.contains("<line") && out.contains("(above this scale)"), "{out}");
        let mut on = String::new();
        plot.reference(&mut on, "budget", 1048576.0, &["device budget".into(), "1 MiB".into()]);
        assert!(on.contains("<line") && on.contains(r#"x="606.0""#), "{on}");
    }
}
