 20:52:56 up 27 min,  0 user,  load average: 1.97, 1.90, 1.52
