 16:59:04 up 59 min,  0 user,  load average: 2.02, 1.61, 1.33
