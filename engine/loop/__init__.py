"""The loop page (home): the at-a-glance record (glance) and one block's sub-steps (inspect)."""
