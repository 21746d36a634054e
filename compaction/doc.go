// Package compaction is the tiered progressive context compactor: it keeps a long-running
// LLM agent's context inside its model's window by offloading large tool results (Warn),
// summarizing the oldest half of the head (Soft), summarizing the whole head into five
// structured anchors plus prose (Full) and, as a last resort, force-truncating to the most
// recent messages without an LLM call (Emergency).
//
// The package has no Kubernetes dependency so that any Go agent can embed it. Storage
// backends live in compaction/storage/..., the OpenAI-compatible summarizer in
// compaction/summarize/openai; the deterministic extractive summarizer is built in and is
// the default, so everything works with no network.
//
// Compaction is non-destructive: the caller's messages are never modified, every entry
// point returns a derived view.
package compaction
