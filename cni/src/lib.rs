//! The xwire CNI plugin: turns a CNI call into a local-API request to the node daemon (see DESIGN.md).
