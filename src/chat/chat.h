/* chat.h - internal helpers of src/chat shared between template.c and toolcall.c. */
#ifndef NX_CHAT_CHAT_H
#define NX_CHAT_CHAT_H

/* Source of a built-in template ("chatml", "llama3", "mistral"), or NULL. Static. */
const char *chat_builtin_source(const char *name);

#endif
