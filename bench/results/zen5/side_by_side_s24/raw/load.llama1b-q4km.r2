 16:19:29 up 20 min,  0 user,  load average: 1.93, 1.81, 1.32
