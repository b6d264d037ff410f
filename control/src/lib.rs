//! The xwire control plane: topology sources, the wire store, reconciliation and routing (see DESIGN.md).
