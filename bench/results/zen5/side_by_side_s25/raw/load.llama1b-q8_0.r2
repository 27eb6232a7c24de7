 19:48:35 up  3:49,  0 user,  load average: 1.97, 1.84, 1.56
