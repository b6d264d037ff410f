//! Moving the calling thread into a network namespace: the project's one `setns` call.
//! Sockets a thread opens, and interfaces it looks up by name, are then the namespace's.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sched::{setns, CloneFlags};

/// Moves the calling thread into `netns` for good: for a thread made to work there, or a
/// process that does nothing else (a CNI plugin's call). `Visit` goes there and back.
pub fn enter(netns: BorrowedFd<'_>) -> io::Result<()> {
    Ok(setns(netns, CloneFlags::CLONE_NEWNET)?)
}

/// The calling thread inside another network namespace until this is dropped, when it
/// goes back to the one it was in: for a long-lived thread (a fast-path worker) that
/// must open one socket elsewhere and carry on where it was.
pub struct Visit {
    home: File,
}

impl Visit {
    pub fn enter(netns: BorrowedFd<'_>) -> io::Result<Visit> {
        let home = File::open("/proc/thread-self/ns/net")?;
        enter(netns)?;
        Ok(Visit { home })
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        // A thread left in the namespace it visited would do all its later work there.
        enter(self.home.as_fd()).expect("a thread can go back to the network namespace it was in");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NetnsFd;

    #[test]
    fn a_visit_goes_back_to_where_the_thread_was() {
        let name = format!("xw-visit-{}", std::process::id());
        let _removed = crate::tests::Removed::named(&name);
        let away = crate::named::add(&name).unwrap();
        std::thread::spawn(move || {
            let home = NetnsFd::current().unwrap();
            {
                let _visit = Visit::enter(away.file().as_fd()).unwrap();
                assert!(NetnsFd::current().unwrap().is_same(&away).unwrap());
            }
            assert!(NetnsFd::current().unwrap().is_same(&home).unwrap());
        })
        .join()
        .unwrap();
    }
}
