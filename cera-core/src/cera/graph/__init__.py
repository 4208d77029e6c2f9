"""Ops and the graph: the op table (`ops`), the graph a family's forward pass records
(`builder`: GraphBuilder, Graph, Layout, Outputs, run_eager), and the core's planning of a
graph before a backend compiles it (`planning`: views, fused steps, buffer liveness)."""
