//! Packet capture on a link, both directions, to pcapng: a tap the worker offers frames
//! to (`tap.rs`) and the file a writer thread makes of them (`pcapng.rs`).

mod pcapng;
mod tap;

pub use pcapng::{CaptureError, CaptureWriter};
pub use tap::{Captured, Direction, Tap, TapCounters, TapReader};
