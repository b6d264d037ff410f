//! The xwire data plane: ports, pinned poll-mode workers and the link table (see DESIGN.md).

pub mod counters;
pub mod link_table;
