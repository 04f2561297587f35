"""What the plugin read from the command line, for the collected test module: the kernel under
test and the profile. `kernel` stays None in a run without --fa-kernel (the plugin is inert)."""

kernel = None
profile = None
