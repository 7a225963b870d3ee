"""Experiments that run the loop many times and measure it: prefill vs decode (timeline), speculative decoding
(drafters, the race), batching and scheduling, and the person-driven stepper."""
