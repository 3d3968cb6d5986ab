"""Who may do what: API-key authentication and team selection, issued keys, and whether a target
can honour a request's features."""
