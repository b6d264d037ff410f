//! The xwire data plane: ports, pinned poll-mode workers and the link table (see DESIGN.md).
