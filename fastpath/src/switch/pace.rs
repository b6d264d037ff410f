//! When the worker passes over its ports next: at once, after a nap, or once a socket
//! wakes it. A pure decision, from what the last pass did and how long ago the worker
//! last had work; `Switch::run` carries it out.
//!
//! Why naps. A worker that sleeps until a socket is readable is woken per frame at
//! moderate rates, and a wake-up across CPUs is an interrupt to the other CPU, which on a
//! virtual machine exits to the host: measured with `xwire-perf remote-wire` at 50 kpps,
//! the generator's kick spent 9% of the machine waking the node's worker. A worker that
//! spins instead (as before: for `idle_spin` after its last frame) burns its core
//! whenever frames come closer together than that, 22 µs of the machine's CPU per frame
//! at 50 kpps against kernel VXLAN's 2.6. In between, as NAPI does with
//! `gro_flush_timeout`: while traffic flows the worker naps `coalesce` between passes on
//! a timer of its own CPU, with no socket to wake it, and each pass takes what gathered
//! meanwhile, several frames per pass and per QUIC packet. A pass that stops at a
//! batch's end (more is waiting) is followed by the next at once; a quiet `idle_spin`
//! ends the naps, and a frame wakes the worker again.
//!
//! A worker whose own ports have been quiet for `idle_spin` only receives from the wire:
//! it waits for a peer's packet instead of napping (`NapUntilPeer`), until it would
//! sleep anyway. The peer sends at most once per pass of its own, itself a nap apart, so
//! the receiver passes about once per packet and hands each on as it comes, instead of
//! passing in vain between packets and holding each up to a nap. The wait lasts at least
//! half a nap however early a packet comes: a receiver kept busy by its peers passes at
//! most twice as often as napping made it. A worker whose ports have frames naps as
//! before: their frames come unannounced, and two such workers (a wire busy both ways)
//! would otherwise wake each other and pass in turn. A frame that comes to a quiet port
//! meanwhile waits for the next packet or the end of the wait, at most `idle_spin`,
//! once: when a direction starts while the other flows.
//!
//! Measured with `xwire-perf remote-wire` at 50 kpps, 64 and 1514 B, both carriers,
//! three runs each alternated with the fixed nap: the receiving worker passed 28k times
//! in 3 s instead of 39k; the sink's p99 fell from 243–268 µs to 158–246 µs (1.65–1.87×
//! VXLAN's to 1.12–1.76×) and the machine's CPU per frame by 2–13% (1.93–2.39× VXLAN's
//! to 1.71–2.21×). Waiting a whole nap before the packet instead of half measured worse
//! (p99 159–324 µs). Loss-free at 64 B, two runs each: no lower.
//!
//! `coalesce`, first chosen by `xwire-perf remote-wire --coalesce-us N` before the wait
//! for a peer's packet above (64 and 1514 B at 50 kpps, the machine's CPU per frame, one
//! run each): 0 (spin) 21.1 and 21.4 µs; 20 µs: 7.3 and 9.8; 50 µs: 5.4 and 7.0;
//! 100 µs: 4.5 and 6.1. Measured again with that wait (3 December 2026, alternated runs
//! of `--no-peak --no-lossfree --no-tcp`, both carriers), a fixed 100 µs cost 10–20%
//! less CPU per frame than 50 µs at 64 B, with the same median latency, but its loss-free
//! rate at 64 B was lower on the datagram carrier (a median of 0.83× VXLAN's against
//! 1.02×), in searches that run at 100–500 kpps.
//!
//! So the nap stretches only where few frames come: from `coalesce` to one and a half times
//! as long (`longest_nap`), until a pass would find about `GATHER` frames at the last
//! pass's rate. At 50 kpps that is 75 µs; from about 120 kpps up, where the loss-free
//! searches run, it is `coalesce` as before. Measured the same way (alternated, 0.1–1.5%
//! steal but for one run of the twice-as-long stretch at 6.8%), the stretch against the
//! fixed 50 µs, CPU per frame over VXLAN's and p99 over VXLAN's: up to 75 µs (three runs),
//! 64 B 1.64–2.00× (median 1.81) and 1514 B 1.53–2.40× (1.96), p99 1.72–2.30× and
//! 0.25–3.74× (1.86, 1.49); fixed 50 µs (seven runs), 1.74–2.37× (2.06) and 1.86–2.54×
//! (2.12), p99 0.28–3.89× and 0.98–36× (1.73, 1.96). Up to 100 µs (seven runs) cost less
//! again (median 1.74× and 1.81×) but raised p99 at 1514 B to a median 2.34× and the median
//! latency by about 6 µs more. In the loss-free search (both sizes, two alternated runs
//! each, 0.8–6.6% steal) both settings had searches that passed no rate; the quietest run,
//! with the stretch, was within the fixed nap's ranges (64 B 0.68–1.27× VXLAN's, 1514 B
//! 0.60–0.73×). A third pair at 1514 B only, with 0.3–0.4% steal: 0.52–0.79× with the
//! stretch, 0.48–0.71× fixed. At 64 B, alternated runs at 0.1–2.5% steal (those at 3.7–6.6%
//! had searches that passed no rate, with either setting), medians of a run's eight
//! loss-free ratios: 0.92, 0.91, 1.11 and 1.12 with the stretch; 0.90, 0.78, 1.02 and
//! 1.06 fixed. (The 1.13 once read for the fixed nap's first run was a slip: it is
//! 0.90.) So the stretch does not lower the loss-free rate, as expected of a rule that
//! does not act at the rates those searches settle at.

use std::time::Duration;

/// What the worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Pass again at once.
    Pass,
    /// Pass again after letting anything else runnable on this CPU run (the receiving
    /// veth's softirq that the worker's own sends start, most often).
    Yield,
    /// Sleep this long, woken by nothing else, then pass.
    Nap(Duration),
    /// Sleep until a peer node's packet arrives, but at least `shortest` and at most
    /// `longest`; then pass.
    NapUntilPeer {
        shortest: Duration,
        longest: Duration,
    },
    /// Sleep until a socket is readable, a command comes or a timer is due.
    Sleep,
}

/// How a worker paces its passes (`WorkerConfig`'s fields of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pacing {
    pub(super) busy_poll: bool,
    pub(super) idle_spin: Duration,
    pub(super) coalesce: Duration,
}

/// How close a held frame's time must be for the worker to pass until it rather than
/// sleep: about what a sleeping thread takes to run again once its timer fires (the
/// sleeper's timer is exact to the microsecond; waking is not).
pub(super) const HELD_SPIN: Duration = Duration::from_micros(30);

/// How long a worker passes again at once (`Next::Pass`), pass after pass, before a pass
/// cut short by its batch lets anything else runnable on its CPU run once. On a CPU that two nodes' workers
/// share (the lab, the perf scenarios), the receiving worker otherwise waited behind a
/// busy sender for up to 46 ms at a time: its UDP socket overflowed and the sender's
/// overload response refused frames. `xwire-perf remote-wire --sizes 64 --paths
/// kernel-vxlan,xwire-datagram --flows b-to-a` with `--verbose`, three pairs alternated
/// at 0.1% steal: loss-free 1.16, 1.21 and 1.17x VXLAN's against 0.97, 1.08 and 0.95x,
/// `RcvbufErrors` 0, 365 and 0 against 1,608, 654 and 1,547. A fourth pair carried 356k
/// against 285k pps (0.98x against 1.13x, VXLAN itself moving 252k-364k between the runs),
/// with no socket overflow against 4,175. A yield costs a system call a millisecond. A
/// quarter of this (0.25 ms) did not shorten the tail at 50 kpps where the two workers
/// share a CPU: p99 over VXLAN's 1.47-1.72x at 64 B and 2.49-35x at 1514 B, against
/// 1.55-2.06x and 1.72-4.93x (three alternated pairs).
pub(super) const LONGEST_STREAK: Duration = Duration::from_millis(1);

/// How many frames a pass should find while traffic flows: a nap stretches from `coalesce`
/// up to one and a half times as long until, at the rate the last pass saw, about this many
/// gather. With the default 50 µs, up to about 80 kpps that is the longest nap (75 µs), and
/// from about 120 kpps the shortest. The module comment has the measurements.
pub(super) const GATHER: u32 = 6;

/// The longest a nap stretches to while traffic flows, for a worker whose shortest is
/// `coalesce`.
pub(crate) fn longest_nap(coalesce: Duration) -> Duration {
    coalesce * 3 / 2
}

/// What the last pass did and when, as `next` needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AfterPass {
    /// Frames the pass moved, from the worker's ports and from the wire.
    pub(super) moved: usize,
    /// The pass stopped at a batch's end with more waiting.
    pub(super) backlog: bool,
    /// From the start of the first of the passes that have followed one another at once
    /// (`Next::Pass`) to the end of this one; zero for a pass that did not follow another
    /// at once (the worker napped, slept or yielded before it).
    pub(super) streak: Duration,
    /// From the start of the pass before to the start of this one: the time in which
    /// `moved` gathered.
    pub(super) cycle: Duration,
    /// Since the worker's last frame or command.
    pub(super) since_work: Duration,
    /// Since the worker last took a frame from its own ports.
    pub(super) since_port_work: Duration,
    /// When the next held (delayed) frame is due.
    pub(super) held_due_in: Option<Duration>,
}

/// What the worker does next, after a pass.
pub(super) fn next(pacing: Pacing, pass: AfterPass) -> Next {
    let AfterPass {
        moved,
        backlog,
        streak,
        cycle,
        since_work,
        since_port_work,
        held_due_in,
    } = pass;
    if backlog {
        return if streak >= LONGEST_STREAK {
            Next::Yield
        } else {
            Next::Pass
        };
    }
    if pacing.busy_poll {
        return if moved > 0 { Next::Pass } else { Next::Yield };
    }
    if held_due_in.is_some_and(|due| due <= HELD_SPIN) {
        return Next::Yield;
    }
    if since_work >= pacing.idle_spin {
        return Next::Sleep;
    }
    if pacing.coalesce.is_zero() {
        return if moved > 0 { Next::Pass } else { Next::Yield };
    }
    // A nap ends early enough for a held frame to leave on time.
    let in_time = |nap: Duration| match held_due_in {
        Some(due) => nap.min(due - HELD_SPIN),
        None => nap,
    };
    if since_port_work >= pacing.idle_spin {
        let longest = in_time(pacing.idle_spin - since_work);
        return Next::NapUntilPeer {
            shortest: (pacing.coalesce / 2).min(longest),
            longest,
        };
    }
    Next::Nap(in_time(nap_length(pacing, moved, cycle)))
}

/// A nap in which about `GATHER` frames come at the rate of `moved` in `cycle`, no shorter
/// than `coalesce` and no longer than one and a half times as long. A pass that found
/// nothing while traffic flows saw the lowest rate there is. A cycle of `idle_spin` or more
/// held a sleep (or the scheduler kept the worker away): it tells nothing of the rate now,
/// and a burst that woke the worker gets the short nap.
fn nap_length(pacing: Pacing, moved: usize, cycle: Duration) -> Duration {
    let shortest = pacing.coalesce;
    let longest = longest_nap(shortest);
    if cycle >= pacing.idle_spin {
        return shortest;
    }
    match u32::try_from(moved) {
        Ok(0) => longest,
        Ok(moved) => (cycle * GATHER / moved).clamp(shortest, longest),
        Err(_) => shortest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    /// Ports quiet for `adaptive()`'s `idle_spin`.
    const QUIET: Duration = Duration::from_micros(200);
    /// Between two passes that each find frames at a high rate: naps stay `coalesce`.
    const BUSY_CYCLE: Duration = Duration::from_micros(10);

    fn after(
        moved: usize,
        backlog: bool,
        (since_work, since_port_work): (Duration, Duration),
        held_due_in: Option<Duration>,
    ) -> AfterPass {
        AfterPass {
            moved,
            backlog,
            streak: Duration::ZERO,
            cycle: BUSY_CYCLE,
            since_work,
            since_port_work,
            held_due_in,
        }
    }

    fn adaptive() -> Pacing {
        Pacing {
            busy_poll: false,
            idle_spin: 200 * US,
            coalesce: 50 * US,
        }
    }

    #[test]
    fn a_pass_cut_short_by_its_batch_is_followed_at_once_whatever_the_pacing() {
        for pacing in [
            adaptive(),
            Pacing {
                busy_poll: true,
                ..adaptive()
            },
        ] {
            assert_eq!(
                next(
                    pacing,
                    after(64, true, (Duration::ZERO, Duration::ZERO), None)
                ),
                Next::Pass
            );
            assert_eq!(
                next(pacing, after(64, true, (900 * US, Duration::ZERO), None)),
                Next::Pass
            );
        }
    }

    #[test]
    fn while_traffic_flows_the_worker_naps_then_sleeps_once_it_stops() {
        let p = adaptive();
        assert_eq!(
            next(p, after(3, false, (Duration::ZERO, Duration::ZERO), None)),
            Next::Nap(50 * US)
        );
        assert_eq!(
            next(p, after(2, false, (120 * US, Duration::ZERO), None)),
            Next::Nap(50 * US)
        );
        assert_eq!(
            next(p, after(0, false, (200 * US, QUIET), None)),
            Next::Sleep
        );
    }

    #[test]
    fn passes_back_to_back_for_longest_streak_yield_once_whatever_the_pacing() {
        for pacing in [
            adaptive(),
            Pacing {
                busy_poll: true,
                ..adaptive()
            },
        ] {
            let cut_short = |streak: Duration| {
                next(
                    pacing,
                    AfterPass {
                        streak,
                        ..after(64, true, (Duration::ZERO, Duration::ZERO), None)
                    },
                )
            };
            assert_eq!(cut_short(LONGEST_STREAK - US), Next::Pass);
            assert_eq!(cut_short(LONGEST_STREAK), Next::Yield);
            assert_eq!(cut_short(10 * LONGEST_STREAK), Next::Yield);
        }
    }

    #[test]
    fn a_nap_stretches_to_one_and_a_half_coalesce_until_a_pass_finds_about_gather_frames() {
        let p = adaptive();
        let nap_after = |moved: usize, cycle: Duration| {
            next(
                p,
                AfterPass {
                    cycle,
                    ..after(moved, false, (Duration::ZERO, Duration::ZERO), None)
                },
            )
        };
        // 50 kpps: 6 frames in 120 µs. The longest nap, and no longer.
        assert_eq!(nap_after(6, 120 * US), Next::Nap(75 * US));
        assert_eq!(nap_after(1, 120 * US), Next::Nap(75 * US));
        // 100 kpps: 6 frames come in 60 µs.
        assert_eq!(nap_after(6, 60 * US), Next::Nap(60 * US));
        // 200 kpps and up: the shortest, `coalesce`.
        assert_eq!(nap_after(15, 75 * US), Next::Nap(50 * US));
        assert_eq!(nap_after(64, 60 * US), Next::Nap(50 * US));
        // The first pass after a sleep (its cycle held the sleep) tells nothing of the
        // rate: a burst that woke the worker gets the short nap.
        assert_eq!(nap_after(1, 5_000 * US), Next::Nap(50 * US));
        assert_eq!(nap_after(1, Duration::MAX), Next::Nap(50 * US));
        // A held frame still bounds the longest nap.
        assert_eq!(
            next(
                p,
                AfterPass {
                    cycle: 120 * US,
                    ..after(6, false, (Duration::ZERO, Duration::ZERO), Some(80 * US))
                },
            ),
            Next::Nap(50 * US)
        );
    }

    #[test]
    fn a_nap_ends_in_time_for_a_held_frame_and_a_frame_due_now_is_passed_for() {
        let p = adaptive();
        assert_eq!(
            next(p, after(1, false, (10 * US, Duration::ZERO), Some(60 * US))),
            Next::Nap(30 * US)
        );
        assert_eq!(
            next(p, after(0, false, (10 * US, QUIET), Some(20 * US))),
            Next::Yield
        );
        // Asleep with a frame held: `run` bounds the sleep by its time.
        assert_eq!(
            next(p, after(0, false, (900 * US, QUIET), Some(5_000 * US))),
            Next::Sleep
        );
    }

    #[test]
    fn a_worker_whose_ports_are_quiet_waits_for_a_peers_packet_instead_of_napping() {
        let p = adaptive();
        let until_peer = |shortest: u32, longest: u32| Next::NapUntilPeer {
            shortest: shortest * US,
            longest: longest * US,
        };
        // Its ports quiet for `idle_spin`, frames only from the wire (or nothing): it
        // waits for the next packet, at least half a nap and until it would sleep anyway.
        assert_eq!(
            next(p, after(4, false, (Duration::ZERO, QUIET), None)),
            until_peer(25, 200)
        );
        assert_eq!(
            next(p, after(0, false, (120 * US, QUIET), None)),
            until_peer(25, 80)
        );
        assert_eq!(
            next(p, after(0, false, (190 * US, QUIET), None)),
            until_peer(10, 10)
        );
        // A held frame leaves on time.
        assert_eq!(
            next(p, after(0, false, (10 * US, QUIET), Some(60 * US))),
            until_peer(25, 30)
        );
        // A pass that found its ports empty between frames that come every 30 µs: their
        // frames come unannounced, so it naps (the longest nap: the pass found nothing).
        assert_eq!(
            next(p, after(0, false, (30 * US, 30 * US), None)),
            Next::Nap(75 * US)
        );
        // Frames from its own ports now, and it naps the whole time.
        assert_eq!(
            next(p, after(5, false, (Duration::ZERO, Duration::ZERO), None)),
            Next::Nap(50 * US)
        );
        // Past `idle_spin` it sleeps as before: any socket wakes it.
        assert_eq!(
            next(p, after(0, false, (200 * US, QUIET), None)),
            Next::Sleep
        );
    }

    #[test]
    fn busy_polling_never_sleeps_and_without_coalescing_the_worker_spins() {
        let busy = Pacing {
            busy_poll: true,
            ..adaptive()
        };
        assert_eq!(
            next(busy, after(0, false, (900 * US, QUIET), None)),
            Next::Yield
        );
        assert_eq!(
            next(busy, after(5, false, (900 * US, Duration::ZERO), None)),
            Next::Pass
        );
        let spin = Pacing {
            coalesce: Duration::ZERO,
            ..adaptive()
        };
        assert_eq!(
            next(spin, after(5, false, (10 * US, Duration::ZERO), None)),
            Next::Pass
        );
        assert_eq!(
            next(spin, after(0, false, (10 * US, QUIET), None)),
            Next::Yield
        );
        assert_eq!(
            next(spin, after(0, false, (300 * US, QUIET), None)),
            Next::Sleep
        );
    }
}
