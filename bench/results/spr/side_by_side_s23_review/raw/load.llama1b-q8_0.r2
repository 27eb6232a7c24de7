 15:24:28 up 15:57,  0 user,  load average: 2.08, 1.92, 1.61
