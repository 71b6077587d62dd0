package pulsar

// Subscriptions lists the subscriptions this server holds.
func (s *Server) Subscriptions() []SubscriptionInfo { return s.m.Subscriptions() }
