"""The small core every stage uses: errors and exit codes, atomic IO and line-checked readers, the CLI
entry and options, progress, the JVM."""
