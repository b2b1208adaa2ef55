# Writes the file INPUT as a C++ raw string literal into OUTPUT.
file(READ "${INPUT}" content)
file(WRITE "${OUTPUT}" "R\"modcembed(${content})modcembed\"\n")
