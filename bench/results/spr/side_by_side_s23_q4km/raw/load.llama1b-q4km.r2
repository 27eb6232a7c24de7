 13:28:08 up 14:01,  0 user,  load average: 1.90, 1.48, 1.21
