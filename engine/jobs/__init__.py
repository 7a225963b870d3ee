"""The engine worker and what it serves: one long-lived thread that runs every forward pass of the process as a job
(worker), the class batcher that serves many sessions' requests in one continuous batch (classbatch), and the share
of that batch one client and one session may hold (seats)."""
