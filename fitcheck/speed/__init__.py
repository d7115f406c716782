"""How fast, and what it costs: decode and prefill tokens/s (decode), the named efficiency factors (efficiency),
training tokens/s and step time (training), and the price per hour and per million tokens (cost)."""
