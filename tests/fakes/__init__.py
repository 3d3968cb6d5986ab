"""Stand-in servers that speak a vendor's wire format faithfully, for the gateway's tests to run against."""
