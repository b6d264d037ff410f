//! Link impairments (delay, jitter, loss, rate, corruption, duplication, reordering), per
//! link and per direction, decided in the switch. Decisions are pure (`direction.rs`),
//! held frames wait in one queue per worker (`held.rs`).

mod direction;
mod held;
mod spec;

pub use direction::{Direction, DropReason, Fate};
pub use held::Held;
pub use spec::{ImpairSpec, Jitter, Loss, QueueLimit, Rate, MAX_DELAY};
