"""The imperative shell: clock, guarded tasks, the control loop and its published state."""
