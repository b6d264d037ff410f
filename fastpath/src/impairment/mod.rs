//! Link impairments (delay, jitter, loss, rate, corruption, duplication, reordering), per
//! link and per direction, decided in the switch. What an impairment asks is the model's
//! (`xwire_model::impairment::spec`); decisions are pure (`direction.rs`), held frames
//! wait in one queue per worker (`held.rs`).

mod direction;
mod held;

pub use direction::{Direction, DropReason, Fate};
pub use held::Held;
pub use xwire_model::impairment::spec::{
    ImpairmentSpec, Jitter, Loss, QueueLimit, Rate, MAX_DELAY,
};

/// The most frames one direction of one link may hold at once (delayed, or waiting for
/// its rate limit); more are dropped as `HeldFull`. 16384 frames carry 100 ms of a
/// 1 Gbit/s wire in 1514-byte frames (8,250) twice over. Memory is taken only while
/// frames are held: at most this many frames of the link's largest size, 24 MiB per
/// direction at an MTU of 1500.
pub(crate) const HELD_PER_DIRECTION: usize = 16384;
