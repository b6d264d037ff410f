//! Log set-up shared by every xwire binary (the CNI plugin aside: it keeps a call log of
//! its own, see `cni/README.md`). Lines go to standard error; which ones is set by
//! `XWIRE_LOG`, or else `RUST_LOG`, in `tracing-subscriber`'s filter syntax (`debug`,
//! `xwire_fastpath=trace,info`, ...). Without either, `default` applies.

#![forbid(unsafe_code)]

use tracing_subscriber::EnvFilter;

/// The variables read, the first one set wins.
const FILTER_VARIABLES: [&str; 2] = ["XWIRE_LOG", "RUST_LOG"];

/// Installs the subscriber. A filter that does not parse is reported on standard error
/// and `default` is used instead: a typo in a variable must not silence the logs.
pub fn init(default: &str) {
    let (filter, problem) = filter(default);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(colour_wanted(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
        .init();
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
}

/// Colour only on a terminal, and not when `NO_COLOR` is set to anything but the empty
/// string (no-color.org).
fn colour_wanted(to_terminal: bool) -> bool {
    to_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn filter(default: &str) -> (EnvFilter, Option<String>) {
    for variable in FILTER_VARIABLES {
        let Ok(value) = std::env::var(variable) else {
            continue;
        };
        return match EnvFilter::try_new(&value) {
            Ok(filter) => (filter, None),
            Err(e) => (
                EnvFilter::new(default),
                Some(format!(
                    "{variable}={value:?} is not a log filter ({e}): using {default:?}"
                )),
            ),
        };
    }
    (EnvFilter::new(default), None)
}
