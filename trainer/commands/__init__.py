"""Sub-commands of ``kgrpc-train``: each module defines HELP, add_arguments(parser) and run(args) "
"-> int."""
