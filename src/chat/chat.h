/* chat.h - internal helpers of src/chat shared between template.c and toolcall.c. */
#ifndef NX_CHAT_CHAT_H
#define NX_CHAT_CHAT_H

#include "nexus.h"

/* Source of a built-in template ("chatml", "llama3", "mistral"), or NULL. Static. */
const char *chat_builtin_source(const char *name);

/* The tool-call family a template's text shows (toolcall.c). */
enum nx_tool_format chat_tool_format_detect(const char *src);

#endif
