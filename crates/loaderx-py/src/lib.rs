//! Python bindings (placeholder until the binding issue lands).
