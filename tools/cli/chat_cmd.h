/* chat_cmd.h - `nexus chat -m MODEL`: conversations through the model's chat template. */
#ifndef NX_CHAT_CMD_H
#define NX_CHAT_CMD_H

/* argv[0] = "chat". Returns the process exit code. */
int chat_main(int argc, char **argv);

#endif
