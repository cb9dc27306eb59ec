# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_text.cmake
# Writes `const char NAME[]` holding IN's text, so a file that is compiled
# into ctimm can also be pasted into the source it generates.
file(READ "${IN}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(WRITE "${OUT}.tmp" "/* made from ${IN} by cmake/embed_text.cmake */\nconst char ${NAME}[] =\n\"${text}\";\n")
file(RENAME "${OUT}.tmp" "${OUT}")
