package proxy

// heldRequest is a request that can hold part of its history where compaction cannot
// reach it: a Responses input with items the engine cannot represent (a provider's
// compaction item, a reference to a stored item), which is kept verbatim with everything
// before it.
type heldRequest interface {
	// held is how many items the request holds so (0: none) and what holds them.
	held() (items int, holder string)
}

// noteHeld logs, the first time a conversation holds part of its history out of
// compaction's reach, how much and why: such a request is compacted, but never below what
// it holds, and the session's status only shows a view that does not shrink (a ContextFits
// condition blaming the system prompt, when the held part is most of the view).
func (p *Proxy) noteHeld(proto, conv string, req request) {
	h, ok := req.(heldRequest)
	if !ok {
		return
	}
	n, holder := h.held()
	if n == 0 {
		return
	}
	if seen, _ := p.heldLogged.ContainsOrAdd(conv, struct{}{}); seen {
		return
	}
	p.cfg.Log.Info("history kept verbatim up to an item compaction cannot represent: never summarized; further requests of this conversation are not logged",
		"protocol", proto, "conversation", conv, "items", n, "item", holder)
}
